"""Weight-sync attestation in whole runs with the rollout on its own worker group (``hybrid_engine=false``).

A clean run never trips (3 steps here; 300 behind ``slow``); a sync that silently skips one
tensor (the rollout worker still counts it, so the sync's own tensor count agrees) stops the run
at the next step with one line naming it.
"""

from __future__ import annotations

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.workers import rollout_worker
from verl.workers.sync_attest import SyncAttestationError

SPLIT = {"actor_rollout_ref.hybrid_engine": False, "actor_rollout_ref.rollout.sync_check.canary_every": 2}


def _fit(model_dir, run_dir, steps: int, **extra) -> dict[int, dict]:
    overrides = tiny_run_overrides(model_dir, run_dir, **{**SPLIT, "trainer.total_training_steps": steps, **extra})
    RLTrainer(config=load_config(None, overrides)).fit()
    return read_metrics(run_dir)


def _assert_clean(metrics: dict[int, dict], steps: int) -> None:
    assert sorted(metrics) == list(range(1, steps + 1))
    for step, row in metrics.items():
        assert row["sync/fingerprint_match"] == 1.0 and row["sync/mismatched_tensors"] == 0.0
        assert row["sync/policy_version"] == step - 1  # the weights step `step` generated with
        if step % 2 == 1:  # canary every 2 syncs, the first included
            assert row["sync/canary_max_abs_diff"] <= 1e-4
    assert any(row["actor/pg_loss"] != 0.0 for row in metrics.values())  # the policy really moved


@pytest.mark.e2e
def test_a_clean_split_run_never_trips(tiny_model_dir, tmp_path):
    _assert_clean(_fit(tiny_model_dir, tmp_path, 3), 3)


@pytest.mark.e2e
def test_a_split_sync_that_skips_one_tensor_stops_the_run_naming_it(tiny_model_dir, tmp_path, monkeypatch):
    name = "model.layers.1.mlp.down_proj.weight"
    real = rollout_worker.load_bucket_in_place  # the copy skips it; the worker still counts it as loaded
    monkeypatch.setattr(
        rollout_worker,
        "load_bucket_in_place",
        lambda target, bucket: real(target, [(n, t) for n, t in bucket if n != name]),
    )
    with pytest.raises(SyncAttestationError, match=rf"after sync 2 .*{name} \(values") as err:
        _fit(tiny_model_dir, tmp_path, 3)
    assert "\n" not in str(err.value)
    assert sorted(read_metrics(tmp_path)) == [1]  # step 1 ran; step 2's generation stopped at the check


@pytest.mark.slow
def test_a_long_clean_split_run_never_trips(tiny_model_dir, tmp_path):
    _assert_clean(_fit(tiny_model_dir, tmp_path, 300), 300)
