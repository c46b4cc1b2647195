"""verl's off-policy metrics on hand-built per-token version tags, counted by hand."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.async_rl.off_policy import off_policy_metrics, trajectory_version_range


def test_spans_and_staleness_are_counted_as_by_hand():
    # row 0: one version (3); row 1: versions 1..3 (a trajectory resumed twice); row 2: version 2,
    # its last two positions are padding tagged -1 (masked out)
    versions = torch.tensor([[3, 3, 3, 3], [1, 1, 2, 3], [2, 2, -1, -1]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    m = off_policy_metrics(versions, mask, trained_version=4)
    # spans: 1, 3, 1 ; staleness (4 - newest): 1, 1, 2 ; worst (4 - oldest): 1, 3, 2
    assert m["training/off_policy/trajectory_spans/mean"] == pytest.approx(5 / 3)
    assert (m["training/off_policy/trajectory_spans/max"], m["training/off_policy/trajectory_spans/min"]) == (3.0, 1.0)
    assert m["training/off_policy/trajectory_staleness/mean"] == pytest.approx(4 / 3)
    assert (m["training/off_policy/trajectory_staleness/max"], m["training/off_policy/trajectory_staleness/min"]) == (
        2.0,
        1.0,
    )
    assert m["training/off_policy/trajectory_staleness_worst/mean"] == pytest.approx(2.0)
    assert m["training/off_policy/trajectory_staleness_worst/max"] == 3.0
    assert m["training/off_policy/trajectory_staleness_worst/min"] == 1.0
    assert len(m) == 9


def test_on_policy_batch_has_span_one_and_staleness_zero():
    versions = torch.full((4, 5), 7)
    m = off_policy_metrics(versions, torch.ones(4, 5), trained_version=7)
    assert m["training/off_policy/trajectory_spans/max"] == 1.0
    assert m["training/off_policy/trajectory_staleness/max"] == 0.0
    assert m["training/off_policy/trajectory_staleness_worst/max"] == 0.0


def test_a_row_without_response_tokens_takes_the_range_of_its_tags():
    v_min, v_max = trajectory_version_range(torch.tensor([[5, 5], [0, 2]]), torch.tensor([[0, 0], [1, 0]]))
    assert v_min.tolist() == [5, 0] and v_max.tolist() == [5, 0]


def test_engine_version_tags_translate_to_loop_versions():
    from verl.trainer.async_rl.rollouter import translate_versions

    # the engine counts actor updates (2 per sync here): tags 0, 2, 4 are loop versions 0, 1, 2
    tags = torch.tensor([[0, 0, 2, -1], [2, 4, 4, 4]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    out = translate_versions(tags, mask, {0: 0, 2: 1, 4: 2})
    assert out.tolist() == [[0, 0, 1, -1], [1, 2, 2, 2]]
    with pytest.raises(KeyError, match="never synced"):
        translate_versions(tags, mask, {0: 0})
