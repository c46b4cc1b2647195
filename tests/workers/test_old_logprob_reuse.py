"""Old-log-prob reuse (issue 14): on-policy, the update forward's own log-probs are the old ones.

The first PPO ratio is exactly 1 and the update equals the recompute path's; off-policy
configurations keep the recompute.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.config.schema import ActorConfig, FSDPConfig, OptimConfig
from verl.engine import MicroBatchSpec, build_engine
from verl.protocol import DataProto
from verl.workers import actor as actor_mod
from verl.workers.actor import PPOActor, compute_log_prob, reuses_old_log_probs

B, P, R = 6, 5, 4


def _batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    mask = torch.ones(B, P + R, dtype=torch.long)
    mask[:3, :2] = 0  # left padding
    resp_mask = torch.ones(B, R, dtype=torch.long)
    resp_mask[1, 2:] = 0
    mask[:, P:] = resp_mask
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": ids[:, P:],
            "response_mask": resp_mask,
            "advantages": torch.randn(B, R, generator=g),
        }
    )


def _actor(model_dir, **cfg) -> PPOActor:
    torch.manual_seed(0)
    module = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config = ActorConfig(ppo_mini_batch_size=B, ppo_micro_batch_size_per_gpu=3, **cfg)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2, weight_decay=0.0), total_steps=2)
    return PPOActor(engine, config)


def test_reused_old_log_probs_give_ratio_one_and_the_recompute_update(tiny_model_dir, monkeypatch):
    ratios = []
    mode = ActorConfig().policy_loss.loss_mode
    vanilla = actor_mod.POLICY_LOSSES[mode]

    def spy(old, logp, *args, **kwargs):
        ratios.append(torch.exp(logp.detach() - old))
        return vanilla(old, logp, *args, **kwargs)

    monkeypatch.setattr(actor_mod, "POLICY_LOSSES", {mode: spy})
    data = _batch()
    reused = _actor(tiny_model_dir)
    m_reuse = reused.update_policy(data, 1.0, B)
    assert ratios and all(torch.equal(r, torch.ones_like(r)) for r in ratios)  # exactly 1, bit for bit
    assert m_reuse["actor/ppo_kl"] == 0.0 and m_reuse["actor/pg_clipfrac"] == 0.0

    recompute = _actor(tiny_model_dir)
    old, _ = compute_log_prob(recompute.engine, data, 1.0, MicroBatchSpec(3, False, 0))
    with_old = data.select(deepcopy=True)
    with_old.batch["old_log_probs"] = old
    m_rec = recompute.update_policy(with_old, 1.0, B)
    assert m_rec["actor/pg_loss"] == pytest.approx(m_reuse["actor/pg_loss"], abs=1e-6)
    assert m_rec["actor/grad_norm"] == pytest.approx(m_reuse["actor/grad_norm"], rel=1e-5)
    for a, b in zip(reused.engine.module.parameters(), recompute.engine.module.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_entropy_only_when_a_loss_or_metric_needs_it(tiny_model_dir):
    data = _batch()
    assert "actor/entropy" not in _actor(tiny_model_dir).update_policy(data, 1.0, B)
    assert "actor/entropy" in _actor(tiny_model_dir, calculate_entropy=True).update_policy(data, 1.0, B)
    # entropy as a metric only leaves the update unchanged
    a, b = _actor(tiny_model_dir), _actor(tiny_model_dir, calculate_entropy=True)
    a.update_policy(data, 1.0, B), b.update_policy(data, 1.0, B)
    for pa, pb in zip(a.engine.module.parameters(), b.engine.module.parameters(), strict=True):
        assert torch.allclose(pa, pb, atol=1e-7)


def test_reuse_condition():
    assert reuses_old_log_probs(ActorConfig(ppo_mini_batch_size=4), 4, False)
    assert not reuses_old_log_probs(ActorConfig(ppo_mini_batch_size=2), 4, False)  # 2 mini-batches
    assert not reuses_old_log_probs(ActorConfig(ppo_mini_batch_size=4, ppo_epochs=2), 4, False)
    assert not reuses_old_log_probs(ActorConfig(ppo_mini_batch_size=4), 4, True)  # KL in reward reads them first
    assert not reuses_old_log_probs(ActorConfig(ppo_mini_batch_size=4, reuse_old_log_probs=False), 4, False)


def test_update_without_old_log_probs_refuses_off_policy_passes(tiny_model_dir):
    with pytest.raises(ValueError, match="on-policy"):
        _actor(tiny_model_dir, ppo_epochs=2).update_policy(_batch(), 1.0, B)
    with pytest.raises(ValueError, match="on-policy"):
        _actor(tiny_model_dir).update_policy(_batch(), 1.0, 3)


def test_reuse_never_reads_rollout_log_probs(tiny_model_dir):
    """A rollout whose numerics differ from training (compiled decode, ``rollout.enforce_eager=false``;
    bf16; vLLM) must not change a reused update: the old log-probs are the update forward's own."""
    plain = _actor(tiny_model_dir)
    m_plain = plain.update_policy(_batch(), 1.0, B)
    skewed = _batch()
    skewed.batch["rollout_log_probs"] = torch.full((B, R), -0.3)  # far from the policy's log-probs
    other = _actor(tiny_model_dir)
    m_skewed = other.update_policy(skewed, 1.0, B)
    assert m_skewed["actor/ppo_kl"] == 0.0 and m_skewed["actor/pg_loss"] == m_plain["actor/pg_loss"]
    for a, b in zip(plain.engine.module.parameters(), other.engine.module.parameters(), strict=True):
        assert torch.equal(a, b)


def test_trainer_reuse_decision_ignores_the_compiled_decode():
    """Reuse takes the update forward's log-probs, so a compiled rollout keeps it on; with rollout
    correction (which compares against ``rollout_log_probs``) it is off either way."""
    from types import SimpleNamespace

    from verl.config import load_config
    from verl.trainer.ppo.trainer import RLTrainer

    for eager in ("true", "false"):
        cfg = load_config(
            None,
            [
                f"actor_rollout_ref.rollout.enforce_eager={eager}",
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            ],
        )  # one mini-batch: on-policy
        expected = reuses_old_log_probs(
            cfg.actor_rollout_ref.actor, cfg.data.train_batch_size, cfg.algorithm.use_kl_in_reward
        )
        assert RLTrainer._reuse_old_log_probs(SimpleNamespace(config=cfg)) is expected is True
        cfg.algorithm.rollout_correction.rollout_is = "token"
        assert RLTrainer._reuse_old_log_probs(SimpleNamespace(config=cfg)) is False
