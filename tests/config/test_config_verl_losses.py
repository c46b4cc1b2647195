"""Config keys of verl's newer policy losses and estimators: accepted, range-checked, or refused."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.config import ConfigError, load_config
from verl.config.schema import AlgorithmConfig
from verl.protocol import DataProto
from verl.trainer.ppo.trainer import RLTrainer

SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
ACTOR = "actor_rollout_ref.actor"


def _error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SMALL, *overrides])
    return str(info.value)


def test_new_losses_load_with_their_keys() -> None:
    cfg = load_config(None, [*SMALL, f"{ACTOR}.policy_loss.loss_mode=dro", f"{ACTOR}.policy_loss.dro_beta=0.1"])
    assert cfg.actor_rollout_ref.actor.policy_loss.dro_beta == 0.1
    cfg = load_config(
        None, [*SMALL, f"{ACTOR}.policy_loss.loss_mode=sapo", f"{ACTOR}.tau_pos=1.0", f"{ACTOR}.tau_neg=1.05"]
    )
    assert cfg.actor_rollout_ref.actor.tau_neg == 1.05
    for mode in ("geo_mean", "dppo_tv", "dppo_kl"):
        assert (
            load_config(
                None, [*SMALL, f"{ACTOR}.policy_loss.loss_mode={mode}"]
            ).actor_rollout_ref.actor.policy_loss.loss_mode
            == mode
        )


def test_bad_loss_keys_are_refused() -> None:
    assert _error([f"{ACTOR}.policy_loss.loss_mode=dro"]) == (
        f"{ACTOR}.policy_loss.dro_beta: must be set (> 0) when {ACTOR}.policy_loss.loss_mode=dro"
    )
    assert _error([f"{ACTOR}.policy_loss.dro_beta=0"]).startswith(f"{ACTOR}.policy_loss.dro_beta: must be > 0")
    assert _error([f"{ACTOR}.tau_neg=0"]).startswith(f"{ACTOR}.tau_neg: must be > 0")


def test_estimator_keys() -> None:
    cfg = load_config(
        None,
        [
            *SMALL,
            "actor_rollout_ref.rollout.n=2",
            "algorithm.adv_estimator=gdpo",
            "algorithm.gdpo_reward_keys=[acc,fmt]",
            "algorithm.gdpo_reward_weights=[1.0,0.5]",
        ],
    )
    assert cfg.algorithm.gdpo_reward_keys == ["acc", "fmt"]
    assert _error(["algorithm.adv_estimator=gdpo"]).startswith("algorithm.gdpo_reward_keys: adv_estimator=gdpo needs")
    assert _error(
        ["algorithm.adv_estimator=gdpo", "algorithm.gdpo_reward_keys=[acc]", "algorithm.gdpo_reward_weights=[1.0,2.0]"]
    ).startswith("algorithm.gdpo_reward_weights: must be 1 finite")
    assert _error(["algorithm.adv_estimator=grpo", "algorithm.gdpo_reward_keys=[acc]"]).startswith(
        "algorithm.gdpo_reward_keys / gdpo_reward_weights apply to adv_estimator=gdpo only"
    )
    otb = ["algorithm.adv_estimator=optimal_token_baseline", "actor_rollout_ref.rollout.n=2"]
    assert _error(otb).startswith(
        "algorithm.adv_estimator=optimal_token_baseline: needs actor_rollout_ref.actor.calculate_sum_pi_squared=true"
    )
    assert load_config(
        None, [*SMALL, *otb, f"{ACTOR}.calculate_sum_pi_squared=true"]
    ).actor_rollout_ref.actor.calculate_sum_pi_squared
    assert _error([f"{ACTOR}.calculate_sum_pi_squared=true"]).startswith(f"{ACTOR}.calculate_sum_pi_squared=true: only")
    for name in ("grpo_vectorized", "rloo_vectorized"):
        assert (
            load_config(
                None, [*SMALL, "actor_rollout_ref.rollout.n=2", f"algorithm.adv_estimator={name}"]
            ).algorithm.adv_estimator
            == name
        )


def test_trainer_passes_the_gdpo_components_from_the_reward_extra_info() -> None:
    # the components and weights of the hand-computed gdpo test (tests/algorithms/test_algo_verl_estimators.py):
    # acc = [1, 0, 1, 1], fmt = [0, 0, 1, 0], groups [a, a, b, b], weights [1, 2]
    #   -> [0.5477226, -0.5477226, 1.0954451, -1.0954451] on the one valid token of each row
    mask = torch.tensor([[1, 0], [1, 0], [1, 0], [1, 0]])
    batch = DataProto.from_dict(
        tensors={"token_level_scores": torch.zeros(4, 2), "response_mask": mask},
        non_tensors={
            "uid": np.array(list("aabb"), dtype=object),
            "acc": np.array([1.0, 0.0, 1.0, 1.0], dtype=object),
            "fmt": np.array([0, 0, 1, 0], dtype=object),
        },
    )
    algo = AlgorithmConfig(adv_estimator="gdpo", gdpo_reward_keys=["acc", "fmt"], gdpo_reward_weights=[1.0, 2.0])
    trainer = SimpleNamespace(config=SimpleNamespace(algorithm=algo), _parts=lambda: None)
    RLTrainer._compute_advantage(trainer, batch)
    want = torch.tensor([0.5477226, -0.5477226, 1.0954451, -1.0954451])
    torch.testing.assert_close(batch.batch["advantages"][:, 0], want, atol=1e-6, rtol=0)
    assert (batch.batch["advantages"][:, 1] == 0).all()
    algo.gdpo_reward_keys = ["acc", "missing"]
    with pytest.raises(ValueError, match="'missing' is not in the reward function's per-sample extra info"):
        RLTrainer._compute_advantage(trainer, batch)


def test_bypass_mode_skips_the_old_log_prob_forward() -> None:
    """As verl: the engine's log-probs are the old ones, the stage hands RS / IS to the actor."""
    from verl.trainer.ppo.rollout_corr import BYPASS_META_KEY, rollout_correction_stage

    rc = load_config(
        None,
        [
            *SMALL,
            "algorithm.rollout_correction.bypass_mode=true",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.rollout_is=sequence",
            "algorithm.rollout_correction.loss_type=reinforce",
        ],
    ).algorithm.rollout_correction
    rollout = torch.log(torch.tensor([[0.5, 0.2], [0.3, 0.9]]))
    batch = DataProto.from_dict(tensors={"rollout_log_probs": rollout, "response_mask": torch.ones(2, 2)})
    from verl.trainer.ppo.trainer import bypass_old_log_probs

    bypass_old_log_probs(batch)  # what the step runs in place of the old-log-prob forward (e2e: no such timer)
    assert torch.equal(batch.batch["old_log_probs"], rollout)
    assert rollout_correction_stage(batch, rc) == {}  # no training log-probs to compare with
    meta = batch.meta_info[BYPASS_META_KEY]
    assert meta["loss_type"] == "reinforce" and meta["rollout_correction"].rollout_is == "sequence"
    assert "set bypass_mode=false" in _error(
        [
            "algorithm.rollout_correction.bypass_mode=true",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.adv_estimator=optimal_token_baseline",
            "actor_rollout_ref.rollout.n=2",
            f"{ACTOR}.calculate_sum_pi_squared=true",
        ]
    )
