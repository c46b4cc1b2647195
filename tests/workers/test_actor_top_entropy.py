"""Top-entropy token selection (``actor.top_entropy_quantile``) and the actor's mismatch sums."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.algorithms.rollout_correction import rollout_mismatch_metrics
from verl.algorithms.token_selection import (
    entropy_quantile_threshold,
    high_entropy_token_mask,
    mismatch_metrics_from_sums,
    rollout_mismatch_sums,
)
from verl.config.schema import ActorConfig, FSDPConfig, OptimConfig
from verl.engine import GlobalCounts, MicroBatchSpec, build_engine
from verl.protocol import DataProto
from verl.workers.actor import PPOActor, compute_log_prob, policy_loss_fn

B, P, R = 6, 5, 4


def test_threshold_keeps_the_top_fraction_by_hand():
    ent = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.7, 0.2, 0.8, 0.4, 0.6, 1.0])
    # sorted 0.1..1.0; (1 - 0.2) * 9 = 7.2 -> 0.8 + 0.2 * (0.9 - 0.8) = 0.82
    assert entropy_quantile_threshold(ent, 0.2) == pytest.approx(0.82)
    mask = high_entropy_token_mask(ent.view(2, 5), torch.ones(2, 5), 0.82)
    assert mask.view(-1).tolist() == [v >= 0.82 for v in ent.tolist()] and int(mask.sum()) == 2  # 0.9 and 1.0
    assert entropy_quantile_threshold(ent, 1.0) == pytest.approx(0.1)  # ρ = 1 keeps every token
    masked = high_entropy_token_mask(ent.view(2, 5), torch.tensor([[1, 1, 0, 1, 1], [1] * 5]), 0.82)
    assert int(masked.sum()) == 1  # a masked token is never selected, whatever its entropy
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        entropy_quantile_threshold(ent, 0.0)


def test_mismatch_sums_reproduce_the_driver_metrics():
    g = torch.Generator().manual_seed(1)
    train, rollout = -torch.rand(4, 7, generator=g) * 3, -torch.rand(4, 7, generator=g) * 3
    mask = (torch.rand(4, 7, generator=g) > 0.3).long()
    want = rollout_mismatch_metrics(train, rollout, mask)
    halves = [rollout_mismatch_sums(train[i : i + 2], rollout[i : i + 2], mask[i : i + 2]) for i in (0, 2)]
    got = mismatch_metrics_from_sums(halves[0][0] + halves[1][0], max(halves[0][1], halves[1][1]))
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
    assert mismatch_metrics_from_sums(torch.zeros(5, dtype=torch.float64), 0.0) == {}


def _batch(advantages: torch.Tensor | None = None) -> DataProto:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (B, P + R), generator=g)
    mask = torch.ones(B, P + R, dtype=torch.long)
    resp_mask = torch.ones(B, R, dtype=torch.long)
    resp_mask[1, 2:] = 0
    mask[:, P:] = resp_mask
    adv = advantages if advantages is not None else torch.randn(B, R, generator=g)
    return DataProto.from_dict(
        tensors={
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": ids[:, P:],
            "response_mask": resp_mask,
            "advantages": adv,
        }
    )


def _actor(model_dir, micro: int = 3, **cfg) -> PPOActor:
    torch.manual_seed(0)
    module = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    config = ActorConfig(ppo_mini_batch_size=B, ppo_micro_batch_size_per_gpu=micro, **cfg)
    engine = build_engine(module, FSDPConfig(), 1, optim=OptimConfig(lr=1e-2, weight_decay=0.0), total_steps=2)
    return PPOActor(engine, config)


def test_selection_matches_a_numpy_quantile_and_zeroes_low_entropy_gradients(tiny_model_dir):
    actor = _actor(tiny_model_dir, top_entropy_quantile=0.25)
    data = _batch()
    _, ent = compute_log_prob(actor.engine, data, 1.0, MicroBatchSpec(B), calculate_entropy=True)
    valid = data.batch["response_mask"].bool()
    tau = float(np.quantile(ent[valid].double().numpy(), 0.75))  # numpy's default is linear interpolation
    threshold = actor._select_high_entropy(data, 1.0, MicroBatchSpec(3))
    assert threshold == pytest.approx(tau, abs=1e-6)
    selected = data.batch["top_entropy_mask"]
    assert torch.equal(selected, valid & (ent >= tau))
    n_tokens = int(valid.sum())  # 22
    # 22 tokens: τ sits at sorted position 0.75 * 21 = 15.75, so positions 16..21 (6 tokens) are kept
    assert int(selected.sum()) == 6

    loss_fn = policy_loss_fn(actor.config, 1.0)
    counts = GlobalCounts(tokens=float(n_tokens), sequences=float(B))
    module = actor.engine.module
    # advantage 1 only on the tokens left out: the policy loss and every gradient are exactly 0
    data.batch["advantages"] = (valid & ~selected).float()
    module.zero_grad()
    loss, metrics = loss_fn(module, data, counts)
    loss.backward()
    assert float(metrics["actor/pg_loss"]) == 0.0
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in module.parameters())
    # advantage 1 only on the selected tokens: ratio 1, token-mean over all 22 response tokens
    data.batch["advantages"] = selected.float()
    module.zero_grad()
    loss, metrics = loss_fn(module, data, counts)
    loss.backward()
    assert float(metrics["actor/pg_loss"]) == pytest.approx(-6 / n_tokens, abs=1e-6)
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in module.parameters())


def test_selection_does_not_depend_on_micro_batching(tiny_model_dir):
    a = _actor(tiny_model_dir, micro=2, top_entropy_quantile=0.5)
    b = _actor(tiny_model_dir, micro=6, top_entropy_quantile=0.5)
    ma, mb = a.update_policy(_batch(), 1.0, B), b.update_policy(_batch(), 1.0, B)
    assert ma["actor/top_entropy_threshold"] == pytest.approx(mb["actor/top_entropy_threshold"], abs=1e-6)
    assert ma["actor/pg_loss"] == pytest.approx(mb["actor/pg_loss"], abs=1e-6)
    assert ma["actor/grad_norm"] == pytest.approx(mb["actor/grad_norm"], rel=1e-5)  # Adam would amplify rounding
    off = _actor(tiny_model_dir).update_policy(_batch(), 1.0, B)
    assert "actor/top_entropy_threshold" not in off and off["actor/pg_loss"] != pytest.approx(ma["actor/pg_loss"])
