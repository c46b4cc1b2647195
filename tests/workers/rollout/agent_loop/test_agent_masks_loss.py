"""Model tokens only: with a multi-turn response_mask (model / tool / model / trailing tool),

- the actor update (policy loss, KL loss, entropy) is unchanged when tool tokens change after the
  last model token, and when old/ref log-probs and advantages at non-model positions are garbage;
- GRPO advantages are 0 on tool tokens and the group-normalised score on model tokens;
- the outcome reward is placed on the last MODEL token, not on a trailing tool token.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from verl.algorithms import compute_advantage
from verl.config.schema import ActorConfig, FSDPConfig, OverlongBufferConfig
from verl.engine import build_engine
from verl.protocol import DataProto
from verl.reward.manager_steps import SampleResult, ScoredBatch, assemble_rewards
from verl.workers.actor import PPOActor

P, R, V = 4, 10, 64
# model tokens 1, tool tokens 0: [model x3, tool x3, model x2, tool x2]
MASK = torch.tensor([1, 1, 1, 0, 0, 0, 1, 1, 0, 0])


def _model() -> torch.nn.Module:
    cfg = AutoConfig.for_model(
        "qwen2",
        vocab_size=V,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg)


def _batch() -> DataProto:
    g = torch.Generator().manual_seed(1)
    n = 4
    responses = torch.randint(3, V, (n, R), generator=g)
    prompts = torch.randint(3, V, (n, P), generator=g)
    attn = torch.ones(n, P + R, dtype=torch.long)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attn,
            "position_ids": torch.arange(P + R).repeat(n, 1),
            "response_mask": MASK.repeat(n, 1),
            "old_log_probs": -torch.rand(n, R, generator=g),
            "ref_log_prob": -torch.rand(n, R, generator=g),
            "advantages": torch.randn(n, R, generator=g) * MASK,
        }
    )


def _update(batch: DataProto) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    module = _model()
    cfg = ActorConfig(
        ppo_mini_batch_size=2,
        ppo_micro_batch_size_per_gpu=2,
        use_kl_loss=True,
        kl_loss_coef=0.1,
        entropy_coeff=0.01,
        shuffle=False,
    )
    cfg.optim.lr = 0.05
    engine = build_engine(module, FSDPConfig(), world_size=1, optim=cfg.optim, total_steps=1)
    metrics = PPOActor(engine, cfg).update_policy(batch, temperature=1.0, mini_batch_size=4)
    return metrics, {k: v.detach().clone() for k, v in module.state_dict().items()}


def test_actor_update_ignores_tool_tokens():
    a = _batch()
    b = copy.deepcopy(a)
    tool = MASK == 0
    trailing = torch.arange(R) >= 8
    b.batch["responses"][:, trailing] = (b.batch["responses"][:, trailing] + 7) % V  # other tool text at the end
    b.batch["input_ids"] = torch.cat([b.batch["prompts"], b.batch["responses"]], 1)
    for key in ("old_log_probs", "ref_log_prob", "advantages"):
        b.batch[key][:, tool] = 1e3  # garbage where the model did not generate
    ma, wa = _update(a)
    mb, wb = _update(b)
    assert set(ma) == set(mb) and "actor/kl_loss" in ma
    for k in ma:
        assert ma[k] == pytest.approx(mb[k], rel=1e-6, abs=1e-7), k
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=1e-7), k
    # the check can fail: garbage on a MODEL position changes the update
    c = copy.deepcopy(a)
    c.batch["old_log_probs"][:, 0] = -5.0
    mc, _ = _update(c)
    assert mc["actor/pg_loss"] != pytest.approx(ma["actor/pg_loss"])


def test_grpo_advantages_only_on_model_tokens():
    mask = MASK.repeat(2, 1).float()
    rewards = torch.zeros(2, R)
    rewards[0, 7], rewards[1, 7] = 1.0, 0.0  # outcome on the last model token
    adv, _ = compute_advantage(
        "grpo", token_level_rewards=rewards, response_mask=mask, index=["g", "g"], norm_adv_by_std_in_grpo=True
    )
    expected = 0.5 / (2**-0.5 + 1e-6)  # (1 - 0.5) / (Bessel std of [1, 0] + eps)
    assert torch.allclose(adv[0], expected * MASK.float(), atol=1e-5)
    assert torch.allclose(adv[1], -expected * MASK.float(), atol=1e-5)


def test_outcome_reward_on_last_model_token():
    mask = MASK.repeat(1, 1)
    batch = ScoredBatch(
        data_sources=["x"], solution_strs=["s"], ground_truths=["g"], extra_infos=[None], response_mask=mask
    )
    out = assemble_rewards(batch, [SampleResult("ok", 1.0, {})], OverlongBufferConfig(), R)
    assert out["reward_tensor"][0].tolist() == [0.0] * 7 + [1.0, 0.0, 0.0]
