"""User code written to verl's documented signatures trains a step unchanged.

A custom advantage estimator (``@register_adv_est``), a custom policy loss
(``@register_policy_loss``) and a reward manager that indexes ``data[i]``
(``@register`` from ``verl.workers.reward_manager``), each in a file named by
``actor_rollout_ref.model.external_lib``.
"""

from __future__ import annotations

import json
import math
import sys
import textwrap

import pytest
import torch
from run_helpers import tiny_run_overrides

from verl.algorithms import agg_loss
from verl.algorithms.verl_signatures import adapt_policy_loss
from verl.config import load_config
from verl.trainer import RLTrainer

ESTIMATOR = """
from collections import defaultdict
from typing import Optional

import numpy as np
import torch

from verl.trainer.ppo.core_algos import register_adv_est

CALLS = []


@register_adv_est("{name}")
def compute_mean_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Optional[object] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    scores = token_level_rewards.sum(dim=-1)
    groups = defaultdict(list)
    for i in range(scores.shape[0]):
        groups[index[i]].append(scores[i])
    means = {{k: torch.stack(v).mean() for k, v in groups.items()}}
    adv = torch.stack([scores[i] - means[index[i]] for i in range(scores.shape[0])])
    adv = adv.unsqueeze(-1) * response_mask
    CALLS.append({{"scores": scores.clone(), "index": list(index), "adv": adv.clone(),
                  "gamma": config.get("gamma"), "lam": config.lam}})
    return adv, adv
"""

POLICY_LOSS = """
from typing import Any, Optional

import torch

from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

CALLS = []


@register_policy_loss("{name}")
def compute_policy_loss_plain_pg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Optional[Any] = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    ratio = torch.exp(log_prob - old_log_prob)
    pg_losses = -advantages * ratio
    pg_loss = agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
    ppo_kl = ((old_log_prob - log_prob) * response_mask).sum() / response_mask.sum()
    CALLS.append({{"loss": float(pg_loss.detach()), "mode": loss_agg_mode, "clip_ratio": config.clip_ratio,
                  "is_weights": rollout_is_weights}})
    return pg_loss, {{"actor/pg_clipfrac": 0.0, "actor/ppo_kl": ppo_kl.detach().item()}}
"""

MANAGER = """
import torch

from verl import DataProto
from verl.workers.reward_manager import register


@register("{name}")
class LengthRewardManager:
    def __init__(self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", scale=1.0):
        self.tokenizer, self.num_examine, self.scale = tokenizer, num_examine, scale

    def __call__(self, data: DataProto, return_dict: bool = False):
        reward_tensor = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        lengths = []
        for i in range(len(data)):
            data_item = data[i]
            prompt_length = data_item.batch["prompts"].shape[-1]
            valid = int(data_item.batch["attention_mask"][prompt_length:].sum())
            ground_truth = data_item.non_tensor_batch["reward_model"]["ground_truth"]
            assert isinstance(ground_truth, str)
            reward_tensor[i, valid - 1] = self.scale * valid
            lengths.append(valid)
        if return_dict:
            return {{"reward_tensor": reward_tensor, "reward_extra_info": {{"length": lengths}}}}
        return reward_tensor
"""


def _module(tmp_path, template, name):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(template.format(name=name)))
    return path


def _loaded(path):
    return next(m for k, m in sys.modules.items() if k.startswith(f"verl_user_{path.stem}_"))


def _train_one_step(model_dir, run_dir, **extra):
    cfg = load_config(None, tiny_run_overrides(model_dir, run_dir, **{"trainer.total_training_steps": 1, **extra}))
    trainer = RLTrainer(config=cfg)
    module = trainer._parts().actor_rollout_wg.workers[0]
    history = trainer.fit()
    return history[-1], module


@pytest.mark.e2e
def test_custom_advantage_estimator_with_verls_signature_trains(tiny_model_dir, tmp_path):
    lib = _module(tmp_path, ESTIMATOR, "est_mean_baseline")
    metrics, _ = _train_one_step(
        tiny_model_dir,
        tmp_path / "run",
        **{
            "actor_rollout_ref.model.external_lib": str(lib),
            "algorithm.adv_estimator": "est_mean_baseline",
            "algorithm.gamma": 0.5,
        },
    )
    calls = _loaded(lib).CALLS
    assert len(calls) == 1
    call = calls[0]
    assert call["gamma"] == 0.5 and call["lam"] == 1.0  # verl's config: attributes and .get
    for i, uid in enumerate(call["index"]):  # hand check: score minus its group's mean
        group = [call["scores"][j] for j, u in enumerate(call["index"]) if u == uid]
        expected = float(call["scores"][i] - sum(group) / len(group))
        assert call["adv"][i].abs().max() == pytest.approx(abs(expected), abs=1e-6)
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0


@pytest.mark.e2e
def test_custom_policy_loss_with_verls_signature_trains(tiny_model_dir, tmp_path):
    lib = _module(tmp_path, POLICY_LOSS, "loss_plain_pg")
    metrics, _ = _train_one_step(
        tiny_model_dir,
        tmp_path / "run",
        **{
            "actor_rollout_ref.model.external_lib": str(lib),
            "actor_rollout_ref.actor.policy_loss.loss_mode": "loss_plain_pg",
            "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
        },
    )
    calls = _loaded(lib).CALLS
    assert len(calls) == 1  # one mini-batch, one micro-batch
    assert calls[0]["mode"] == "seq-mean-token-mean" and calls[0]["clip_ratio"] == 0.2
    assert calls[0]["is_weights"] is None
    # one micro-batch = the whole mini-batch: the logged loss is exactly the user's aggregate
    assert metrics["actor/pg_loss"] == pytest.approx(calls[0]["loss"], abs=1e-6)
    assert metrics["actor/grad_norm"] > 0


@pytest.mark.e2e
def test_reward_manager_indexing_rows_trains(tiny_model_dir, tmp_path):
    lib = _module(tmp_path, MANAGER, "rm_length")
    metrics, _ = _train_one_step(
        tiny_model_dir,
        tmp_path / "run",
        **{
            "actor_rollout_ref.model.external_lib": str(lib),
            "reward_model.reward_manager": "rm_length",
            "+reward_model.reward_kwargs.scale": 0.25,
            "custom_reward_function.path": "null",
        },
    )
    # reward = 0.25 x valid response tokens, so the mean score is 0.25 x the mean response length
    assert metrics["critic/score/mean"] == pytest.approx(0.25 * metrics["response_length/mean"], abs=1e-5)
    assert metrics["reward/length"] == pytest.approx(metrics["response_length/mean"], abs=1e-5)


def test_verl_policy_loss_adapter_keeps_gradient_accumulation_exact():
    """known fault B07 through the adapter: token-mean over micro-batches of 1 and 3 tokens = 1.25."""

    def verl_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        loss_agg_mode="token-mean",
        config=None,
        rollout_is_weights=None,
    ):
        from verl.trainer.ppo.core_algos import agg_loss as verl_agg

        return verl_agg(advantages + 0 * log_prob, response_mask, loss_agg_mode), {}

    loss = adapt_policy_loss(verl_loss)
    per_token = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    zeros = torch.zeros(2, 3, requires_grad=True)
    total = 0.0
    for rows in ([0], [1]):
        out, _ = loss(zeros[rows].detach(), zeros[rows], per_token[rows], mask[rows], loss_agg_mode="token-mean")
        total += float(agg_loss(out, mask[rows], "token-mean", global_token_count=4.0))
    assert total == pytest.approx(1.25, abs=1e-6)
    total = 0.0
    for rows in ([0], [1]):
        out, _ = loss(
            zeros[rows].detach(), zeros[rows], per_token[rows], mask[rows], loss_agg_mode="seq-mean-token-sum"
        )
        total += float(agg_loss(out, mask[rows], "seq-mean-token-sum", global_seq_count=2.0))
    assert total == pytest.approx((2.0 + 3.0) / 2, abs=1e-6)


@pytest.mark.e2e
def test_dapo_dynamic_sampling_dumps_and_val_generations(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    metrics, _ = _train_one_step(
        tiny_model_dir,
        run,
        **{
            "algorithm.filter_groups.enable": "true",
            "algorithm.filter_groups.metric": "seq_reward",
            "data.gen_batch_size": 4,
            "actor_rollout_ref.rollout.n": 4,
            "trainer.rollout_data_dir": str(run / "rollouts"),
            "trainer.validation_data_dir": str(run / "val"),
            "trainer.log_val_generations": 2,
            "data.val_files": "builtin://arithmetic/test",
            "data.val_max_samples": 3,
            "trainer.test_freq": 1,
            "actor_rollout_ref.rollout.val_kwargs.n": 2,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": "true",
            "actor_rollout_ref.rollout.val_kwargs.temperature": 1.0,
        },
    )
    # the dense digit reward varies within a group almost always: one generation batch fills the step
    assert metrics["dynamic_sampling/kept_groups"] >= 4 and metrics["dynamic_sampling/num_gen_batches"] >= 1
    assert metrics["dynamic_sampling/kept_ratio"] == pytest.approx(
        metrics["dynamic_sampling/kept_groups"] / metrics["dynamic_sampling/generated_groups"]
    )
    rows = (run / "rollouts" / "1.jsonl").read_text().splitlines()
    assert len(rows) == 4 * 4 and {"input", "output", "score", "step", "gts"} <= set(json.loads(rows[0]))
    assert (run / "val" / "1.jsonl").is_file() and len((run / "val" / "1.jsonl").read_text().splitlines()) == 3 * 2
    assert len((run / "out" / "val_generations.jsonl").read_text().splitlines()) == 2
    assert "val-core/builtin/arithmetic/reward/mean@2" in metrics and "timing_s/testing" in metrics
    assert "timing_s/update_weights" in metrics and "critic/score/mean" in metrics


@pytest.mark.e2e
def test_del_local_ckpt_after_load_removes_the_loaded_checkpoint(tiny_model_dir, tmp_path):
    run = tmp_path / "run"
    _train_one_step(tiny_model_dir, run, **{"trainer.save_freq": 1})
    assert (run / "ckpt" / "global_step_1").is_dir()
    cfg = load_config(
        None,
        tiny_run_overrides(
            tiny_model_dir,
            run,
            **{"trainer.total_training_steps": 2, "trainer.save_freq": 1, "trainer.del_local_ckpt_after_load": "true"},
        ),
    )
    RLTrainer(config=cfg).fit()
    assert not (run / "ckpt" / "global_step_1").exists() and (run / "ckpt" / "global_step_2").is_dir()
