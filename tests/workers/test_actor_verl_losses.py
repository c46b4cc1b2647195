"""The actor feeds verl's loss settings to sapo / dro and aggregates sapo's term as verl does."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.algorithms import agg_loss
from verl.config.schema import ActorConfig, FSDPConfig, OptimConfig, PolicyLossConfig
from verl.engine import GlobalCounts, MicroBatchSpec, build_engine
from verl.protocol import DataProto
from verl.workers.actor import compute_log_prob, policy_loss_fn

B, P, R = 4, 3, 4


def _batch() -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    resp_mask = (torch.arange(R) < torch.tensor([[4], [1], [3], [2]])).long()  # ragged: token-mean != seq-mean
    mask = torch.cat([torch.ones(B, P, dtype=torch.long), resp_mask], -1)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": ids[:, P:],
            "response_mask": resp_mask,
            "advantages": torch.tensor([[1.0] * R, [-2.0] * R, [0.5] * R, [-1.0] * R]),
        }
    )


def _loss(model_dir, **cfg) -> tuple[float, DataProto]:
    module = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2), total_steps=1)
    data = _batch()
    counts = GlobalCounts(tokens=float(data.batch["response_mask"].sum()), sequences=float(B))
    _, metrics = policy_loss_fn(ActorConfig(ppo_mini_batch_size=B, **cfg), 1.0)(engine.module, data, counts)
    return float(metrics["actor/pg_loss"]), data


def test_sapo_reads_actor_taus_and_is_aggregated_seq_mean_token_mean(tiny_model_dir) -> None:
    # no old_log_probs: ratio 1, gate = sigmoid(0) * 4 / tau = 2 / tau, L = -(2 / tau) A
    # tau_pos 1 (A > 0): L = -2 A; tau_neg 4 (A <= 0): L = -A / 2 -> rows [-2, 1, -1, 0.5]
    # seq-mean-token-mean (verl's fixed mode for sapo) = (-2 + 1 - 1 + 0.5) / 4 = -0.375;
    # the configured token-mean would give (-2*4 + 1*1 - 1*3 + 0.5*2) / 10 = -0.9
    got, _ = _loss(
        tiny_model_dir,
        policy_loss=PolicyLossConfig(loss_mode="sapo"),
        tau_pos=1.0,
        tau_neg=4.0,
        loss_agg_mode="token-mean",
    )
    assert got == pytest.approx(-0.375, abs=1e-6)


def test_dro_reads_policy_loss_dro_beta(tiny_model_dir) -> None:
    # ratio 1, so L = -A log p: the loss is the token-mean of -A log p whatever beta is
    got, data = _loss(tiny_model_dir, policy_loss=PolicyLossConfig(loss_mode="dro", dro_beta=0.5))
    module = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2), total_steps=1)
    lp, _ = compute_log_prob(engine, data, 1.0, MicroBatchSpec(B))
    mask = data.batch["response_mask"]
    want = agg_loss(-data.batch["advantages"] * lp, mask, "token-mean")
    assert got == pytest.approx(float(want), abs=1e-5)
    with pytest.raises(ValueError, match="dro_beta"):
        _loss(tiny_model_dir, policy_loss=PolicyLossConfig(loss_mode="dro"))


def test_bypass_stage_hands_reinforce_and_is_to_the_actor_loss(tiny_model_dir) -> None:
    from types import SimpleNamespace

    from verl.algorithms.rollout_correction import rollout_is_weights
    from verl.trainer.ppo.rollout_corr import BYPASS_META_KEY, rollout_correction_stage

    module = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2), total_steps=1)
    data = _batch()
    lp, _ = compute_log_prob(engine, data, 1.0, MicroBatchSpec(B))
    mask = data.batch["response_mask"]
    g = torch.Generator().manual_seed(1)
    rollout = lp - 0.5 * torch.rand(B, R, generator=g)  # pi_rollout below pi_theta: some rho > C
    data.batch["rollout_log_probs"], data.batch["old_log_probs"] = rollout, lp.clone()
    rc = SimpleNamespace(
        rollout_is="token",
        rollout_is_threshold=1.3,
        rollout_is_batch_normalize=False,
        rollout_rs=None,
        rollout_rs_threshold=None,
        bypass_mode=True,
        loss_type="reinforce",
    )
    rollout_correction_stage(data, rc)
    assert torch.equal(data.batch["old_log_probs"], rollout) and "rollout_is_weights" not in data.batch.keys()
    bypass = data.meta_info[BYPASS_META_KEY]
    assert bypass["loss_type"] == "reinforce" and bypass["rollout_correction"].is_threshold == 1.3
    counts = GlobalCounts(tokens=float(mask.sum()), sequences=float(B))
    _, metrics = policy_loss_fn(ActorConfig(ppo_mini_batch_size=B), 1.0, bypass=bypass)(engine.module, data, counts)
    # REINFORCE with truncated IS, w = min(pi_theta / pi_rollout, 1.3) of the update forward: token-mean of -w A log p
    w, _ = rollout_is_weights(lp, rollout, mask, "token", 1.3)
    assert bool((w == 1.3).any())  # the fixture truncates some weights
    want = agg_loss(-w * data.batch["advantages"] * lp, mask, "token-mean")
    assert float(metrics["actor/pg_loss"]) == pytest.approx(float(want), abs=1e-5)


def test_sum_pi_squared_hand_value_and_the_old_log_prob_stage(tiny_model_dir) -> None:
    from verl.algorithms.logprob import sum_pi_squared_from_logits
    from verl.modules.forward import response_logits
    from verl.workers.actor import compute_sum_pi_squared

    # logits [0, ln 3]: pi = [1/4, 3/4], sum pi^2 = 1/16 + 9/16 = 0.625; [0, 2 ln 3] at temperature 2: the same
    logits = torch.log(torch.tensor([[1.0, 3.0], [1.0, 9.0]]))
    torch.testing.assert_close(sum_pi_squared_from_logits(logits[:1], 1.0), torch.tensor([0.625]))
    torch.testing.assert_close(sum_pi_squared_from_logits(logits[1:], 2.0, chunk_size=1), torch.tensor([0.625]))
    module = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2), total_steps=1)
    data = _batch()
    got = compute_sum_pi_squared(engine, data, 0.7, MicroBatchSpec(3), chunk_size=5)
    b = data.batch
    with torch.no_grad():
        z = response_logits(engine.module, b["input_ids"], b["attention_mask"], b["position_ids"], R) / 0.7
    torch.testing.assert_close(got, torch.softmax(z, -1).square().sum(-1), atol=1e-6, rtol=1e-5)
