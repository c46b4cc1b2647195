"""Values verl's own scripts set that the config layer must accept (and the bad ones it still refuses)."""

from __future__ import annotations

import pytest

from verl.config import ConfigError, load_config

SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]
MODEL = "actor_rollout_ref.model"


def _error(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(None, [*SMALL, *overrides])
    return str(info.value)


def test_clip_ratio_low_of_verl_cispo_scripts_loads() -> None:
    # examples/cispo_trainer sets clip_ratio_low=10: no lower bound on the ratio
    cfg = load_config(
        None,
        [
            *SMALL,
            "actor_rollout_ref.actor.policy_loss.loss_mode=cispo",
            "actor_rollout_ref.actor.clip_ratio_low=10",
            "actor_rollout_ref.actor.clip_ratio_high=4",
        ],
    )
    assert cfg.actor_rollout_ref.actor.clip_ratio_low == 10.0
    assert _error(["actor_rollout_ref.actor.clip_ratio_low=-0.5"]).startswith(
        "actor_rollout_ref.actor.clip_ratio_low: must be >= 0"
    )


@pytest.mark.parametrize("section", [MODEL, "critic.model"])
def test_lora_fields_are_free_while_lora_is_off(section: str) -> None:
    cfg = load_config(None, [*SMALL, f"{section}.lora_alpha=0", f"{section}.exclude_modules=.*lm_head"])
    model = cfg.actor_rollout_ref.model if section == MODEL else cfg.critic.model
    assert (model.lora_rank, model.lora_alpha, model.exclude_modules) == (0, 0, ".*lm_head")


def test_lora_fields_are_checked_when_lora_is_on() -> None:
    assert _error([f"{MODEL}.lora_rank=8", f"{MODEL}.lora_alpha=0"]) == (
        f"{MODEL}.lora_alpha: must be > 0 when {MODEL}.lora_rank > 0, got 0"
    )
    assert _error([f"{MODEL}.lora_rank=8", f"{MODEL}.exclude_modules='(q_proj'"]).startswith(
        f"{MODEL}.exclude_modules: not a valid regular expression"
    )
    cfg = load_config(None, [*SMALL, f"{MODEL}.lora_rank=8", f"{MODEL}.exclude_modules=.*layers\\.0\\..*"])
    assert cfg.actor_rollout_ref.model.exclude_modules == ".*layers\\.0\\..*"


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_grpo_rloo_run_with_verl_default_n_1(
    estimator: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl.config import consistency

    monkeypatch.setattr(consistency, "_WARNED", set())  # the warning is logged once per process
    for _ in range(2):
        cfg = load_config(None, [*SMALL, f"algorithm.adv_estimator={estimator}"])
    assert cfg.actor_rollout_ref.rollout.n == 1
    warned = [r.getMessage() for r in caplog.records if "a group baseline needs rollout.n >= 2" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        f"algorithm.adv_estimator={estimator} with actor_rollout_ref.rollout.n=1"
    )


def test_bypass_mode_takes_rollout_is_rs_and_loss_type_as_verl() -> None:
    # the actor's bypass_mode loss applies them (tests/workers/test_actor_verl_losses.py)
    rc = "algorithm.rollout_correction"
    base = [f"{rc}.bypass_mode=true", "actor_rollout_ref.rollout.calculate_log_probs=true"]
    assert load_config(None, [*SMALL, *base]).algorithm.rollout_correction.bypass_mode is True
    for extra in ([f"{rc}.rollout_is=token"], [f"{rc}.rollout_rs=seq_mean_k1", f"{rc}.rollout_rs_threshold='0.5_2.0'"]):
        assert (
            load_config(
                None, [*SMALL, *base, *extra, f"{rc}.loss_type=reinforce"]
            ).algorithm.rollout_correction.loss_type
            == "reinforce"
        )
    assert _error([*base, f"{rc}.loss_type=pg"]).startswith(f"{rc}.loss_type: must be one of")
    assert "leave loss_mode=vanilla" in _error([*base, "actor_rollout_ref.actor.policy_loss.loss_mode=sapo"])
    assert "set algorithm.rollout_correction.bypass_mode=true instead" in _error(
        ["actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode"]
    )
