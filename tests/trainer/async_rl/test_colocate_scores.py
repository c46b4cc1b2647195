"""colocate_async joins its groups' streamed scores: tensors, extra info, metrics and failure counts."""

from __future__ import annotations

import torch

from verl.reward.scoring import FailureCounts
from verl.trainer.async_rl.colocate import _concat_scored


def _part(value: float, failures: FailureCounts | None) -> dict:
    part = {
        "reward_tensor": torch.full((2, 3), value),
        "reward_extra_info": {"acc": [value, value]},
        "reward_metrics": {"reward/num_errors": float(failures.errors if failures else 0)},
    }
    if failures is not None:
        part["reward_failures"] = failures
    return part


def test_failure_counts_of_every_group_are_summed() -> None:
    a = FailureCounts(total=2, errors=1, first={"error": "sample 0: boom"})
    b = FailureCounts(total=2, timeouts=2, skipped=1, hung_at="sample 1")
    out = _concat_scored([_part(1.0, a), _part(2.0, b)], n=2)
    assert out["reward_tensor"].shape == (4, 3) and out["reward_tensor"][2:].eq(2.0).all()
    assert out["reward_extra_info"]["acc"] == [1.0, 1.0, 2.0, 2.0]
    assert out["reward_metrics"] == {"reward/num_errors": 1.0}
    f = out["reward_failures"]
    assert (f.total, f.errors, f.timeouts, f.skipped, f.failed) == (4, 1, 2, 1, 3)
    assert f.first == {"error": "sample 0: boom"} and f.hung_at == "sample 1"


def test_no_failure_counts_when_a_group_did_not_report_them() -> None:
    out = _concat_scored([_part(1.0, FailureCounts(total=2)), _part(2.0, None)], n=2)
    assert "reward_failures" not in out
