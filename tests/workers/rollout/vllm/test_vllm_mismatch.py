"""Rollout/training mismatch on purpose: the trainer stage, the actor's weighted loss, a short run.

No vLLM needed: the mismatch is injected into the ``hf`` engine's ``rollout_log_probs``, which
is exactly what a bf16 or differently-kernelled engine produces.
"""

from __future__ import annotations

import math

import pytest
import torch
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.protocol import DataProto
from verl.trainer.ppo.rollout_corr import rollout_correction_stage


def _rc(*overrides: str):
    return load_config(None, [f"algorithm.rollout_correction.{o}" for o in overrides]).algorithm.rollout_correction


def _batch() -> DataProto:
    # ρ = π_train / π_rollout: row 0 [2, 0.5, 1], row 1 [4, 1, pad]
    train = torch.tensor([[0.5, 0.2, 0.3], [0.8, 0.1, 0.7]]).log()
    rollout = torch.tensor([[0.25, 0.4, 0.3], [0.2, 0.1, 0.05]]).log()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return DataProto.from_dict(tensors={"old_log_probs": train, "rollout_log_probs": rollout, "response_mask": mask})


def test_stage_weights_rejection_and_metrics() -> None:
    batch = _batch()
    metrics = rollout_correction_stage(
        batch,
        _rc("rollout_is=token", "rollout_is_threshold=3.0", "rollout_rs=token_k1", "rollout_rs_threshold='0.4_2.5'"),
    )
    torch.testing.assert_close(batch.batch["response_mask"], torch.tensor([[1, 1, 1], [0, 1, 0]]))
    torch.testing.assert_close(batch.batch["rollout_is_weights"], torch.tensor([[2.0, 0.5, 1.0], [0.0, 1.0, 0.0]]))
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(0.6)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(4.5 / 4)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(0.2)


def test_stage_metrics_only_bypass_and_missing_logprobs() -> None:
    batch = _batch()
    metrics = rollout_correction_stage(batch, _rc())
    assert "rollout_is_weights" not in batch.batch.keys() and "rollout_corr/rollout_is_mean" not in metrics
    assert metrics["training/rollout_kl"] == pytest.approx(-math.log(4) / 5, abs=1e-6)
    batch = _batch()
    rollout_correction_stage(batch, _rc("bypass_mode=true"))
    torch.testing.assert_close(batch.batch["old_log_probs"], batch.batch["rollout_log_probs"])
    no_engine_logprobs = DataProto.from_dict(
        tensors={k: v for k, v in _batch().batch.items() if k != "rollout_log_probs"}
    )
    assert rollout_correction_stage(no_engine_logprobs, _rc()) == {}
    with pytest.raises(ValueError, match="needs rollout_log_probs"):
        rollout_correction_stage(no_engine_logprobs, _rc("rollout_is=sequence"))


def test_actor_loss_multiplies_the_policy_loss_by_the_weights(tiny_model_dir) -> None:
    from verl.engine import GlobalCounts
    from verl.modules import create_model
    from verl.modules.forward import compute_log_probs
    from verl.workers.actor import policy_loss_fn

    cfg = load_config(
        None, [f"actor_rollout_ref.model.path={tiny_model_dir}", "actor_rollout_ref.actor.entropy_coeff=0"]
    )
    module = create_model("actor", cfg.actor_rollout_ref.model)
    ids = torch.randint(4, 60, (4, 10))
    tensors = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "position_ids": torch.arange(10).expand(4, 10),
        "responses": ids[:, 6:],
        "response_mask": torch.ones(4, 4),
        "advantages": torch.ones(4, 4),
    }
    with torch.no_grad():  # on-policy: ratio 1, so every token's loss is −A = −1
        tensors["old_log_probs"] = compute_log_probs(module, ids, tensors["attention_mask"], tensors["position_ids"], 4)
    loss_fn = policy_loss_fn(cfg.actor_rollout_ref.actor, temperature=1.0)
    counts = GlobalCounts(tokens=16.0, sequences=4.0)
    _, plain = loss_fn(module, DataProto.from_dict(tensors=tensors), counts)
    assert float(plain["actor/pg_loss"]) == pytest.approx(-1.0, abs=1e-5)
    weights = torch.tensor([[0.25] * 4, [0.5] * 4, [1.0] * 4, [0.0] * 4])
    _, weighted = loss_fn(module, DataProto.from_dict(tensors={**tensors, "rollout_is_weights": weights}), counts)
    assert float(weighted["actor/pg_loss"]) == pytest.approx(-(0.25 + 0.5 + 1.0) * 4 / 16, abs=1e-5)


@pytest.mark.e2e
def test_run_with_perturbed_rollout_logprobs_logs_and_truncates(tiny_model_dir, tmp_path, monkeypatch) -> None:
    from verl.trainer import RLTrainer
    from verl.workers.rollout.hf.hf_rollout import HFRollout

    original = HFRollout.generate_sequences

    def perturbed(self, prompts):  # the engine claims lower probabilities than the trainer computes
        out = original(self, prompts)
        out.batch["rollout_log_probs"] = out.batch["rollout_log_probs"] - 0.5 * out.batch["response_mask"]
        return out

    monkeypatch.setattr(HFRollout, "generate_sequences", perturbed)
    overrides = tiny_run_overrides(
        tiny_model_dir,
        tmp_path,
        **{
            "algorithm.rollout_correction.rollout_is": "token",
            "algorithm.rollout_correction.rollout_is_threshold": 1.2,
        },
    )
    RLTrainer(config=load_config(None, overrides)).fit()
    for m in read_metrics(tmp_path).values():
        assert m["training/rollout_kl"] == pytest.approx(-0.5, abs=1e-4)  # mean log π_rollout − log π_train
        assert m["training/rollout_probs_diff_max"] > 0
        # every ratio is e^{0.5} ≈ 1.65 > C = 1.2: every weight is truncated to C
        assert m["rollout_corr/rollout_is_mean"] == pytest.approx(1.2, abs=1e-5)
        assert m["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1.0)
