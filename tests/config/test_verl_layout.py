"""verl's current config layout: ppo_trainer.yaml composed by Hydra, _generated_*.yaml, reward.*,
_target_ markers, critic.fsdp, null placeholders and the unknown-key hints.

The fixture tree is a copy of verl's verl/trainer/config YAML (tests/fixtures/verl_config).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl.config import ConfigError, load_config
from verl.config.hydra_compose import compose_file

VERL_CONFIG = Path(__file__).resolve().parents[1] / "fixtures" / "verl_config"
CPU = ["trainer.device=cpu", "actor_rollout_ref.rollout.name=hf"]
GENERATED = sorted(p.name for p in VERL_CONFIG.glob("_generated_*.yaml"))


def _load(*overrides: str, name: str = "ppo_trainer.yaml"):
    return load_config(VERL_CONFIG / name, [*CPU, *overrides])


def test_hydra_composition_equals_verls_generated_file():
    composed = compose_file(VERL_CONFIG / "ppo_trainer.yaml")
    generated = OmegaConf.to_container(OmegaConf.load(VERL_CONFIG / "_generated_ppo_trainer.yaml"), resolve=False)
    assert composed.pop("model_engine") == "dp"
    assert composed == generated


@pytest.mark.parametrize("name", GENERATED)
def test_every_generated_file_loads_with_no_key_removed(name):
    # the Megatron / TorchTitan / VeOmni files too: their data-parallel roles run on FSDP2
    cfg = _load(name=name)
    assert cfg.actor_rollout_ref.actor.strategy in ("fsdp", "fsdp2") and cfg.critic.strategy in ("fsdp", "fsdp2")
    assert cfg.reward_model.reward_manager == "naive" and cfg.custom_reward_function.name == "compute_score"


def test_ppo_trainer_values_and_group_override():
    cfg = _load("model_engine=dp", "actor_rollout_ref.actor.optim.lr=3e-6")
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-6
    assert cfg.trainer.experiment_name == "gsm8k"  # verl's own value
    assert cfg.actor_rollout_ref.rollout.calculate_log_probs is True  # verl's YAML default
    assert cfg.actor_rollout_ref.rollout.n_gpus_per_node == cfg.trainer.n_gpus_per_node


def test_user_file_starting_from_ppo_trainer_via_searchpath(tmp_path):
    user = tmp_path / "my_run.yaml"
    user.write_text(
        f"hydra:\n  searchpath:\n    - file://{VERL_CONFIG}\ndefaults:\n  - ppo_trainer\n  - _self_\n"
        "algorithm:\n  adv_estimator: grpo\nreward:\n  reward_manager:\n    name: dapo\n"
    )
    cfg = load_config(user, CPU)
    assert cfg.algorithm.adv_estimator == "grpo"
    assert cfg.reward_model.reward_manager == "dapo" and cfg.reward.reward_manager.name == "dapo"
    assert cfg.actor_rollout_ref.actor.clip_ratio_c == 3.0  # from verl's actor group


def test_reward_new_and_legacy_spellings_agree():
    new = _load("reward.custom_reward_function.path=/x/score.py", "reward.reward_manager.name=dapo")
    old = _load("custom_reward_function.path=/x/score.py", "reward_model.reward_manager=dapo")
    for cfg in (new, old):
        assert cfg.custom_reward_function.path == "/x/score.py" and cfg.reward_model.reward_manager == "dapo"
        assert cfg.reward.custom_reward_function.path == "/x/score.py" and cfg.reward.reward_manager.name == "dapo"
    with pytest.raises(
        ConfigError, match=r"reward\.reward_manager\.name='prime' and reward_model\.reward_manager='dapo'"
    ):
        _load("reward.reward_manager.name=prime", "reward_model.reward_manager=dapo")


def test_reward_model_path_migrates():
    cfg = _load("reward.reward_model.model_path=/rm")
    assert cfg.reward_model.model.path == "/rm"


def test_reward_model_served_by_verls_reward_loop_runs_in_the_reward_model_worker():
    cfg = _load(
        "reward.reward_model.enable=true",
        "reward.reward_model.model_path=/rm",
        "reward.reward_model.rollout.name=vllm",
        "reward.reward_model.rollout.tensor_model_parallel_size=1",
    )
    assert cfg.reward_model.enable is True and cfg.reward_model.model.path == "/rm"


def _user_file(tmp_path: Path, body: str) -> Path:
    user = tmp_path / "run.yaml"
    user.write_text(
        f"hydra:\n  searchpath:\n    - file://{VERL_CONFIG}\ndefaults:\n  - ppo_trainer\n  - _self_\n" + body
    )
    return user


def test_target_markers_are_checked(tmp_path):
    wrong = _user_file(tmp_path, "critic:\n  optim:\n    _target_: verl.workers.config.FSDPEngineConfig\n")
    with pytest.raises(
        ConfigError, match=r"critic\.optim\._target_='verl\.workers\.config\.FSDPEngineConfig' does not mark"
    ):
        load_config(wrong, CPU)
    unmarked = _user_file(tmp_path, "trainer:\n  _target_: x.Y\n")
    with pytest.raises(ConfigError, match=r"verl marks no section 'trainer'"):
        load_config(unmarked, CPU)


def test_critic_fsdp_and_model_fsdp_config_hold_the_same_values():
    cfg = _load("critic.fsdp.reshard_after_forward=false")
    assert (
        cfg.critic.model.fsdp_config.reshard_after_forward is False and cfg.critic.fsdp.reshard_after_forward is False
    )
    with pytest.raises(ConfigError, match=r"critic\.fsdp\.reshard_after_forward=False and critic\.model\.fsdp_config"):
        _load("critic.fsdp.reshard_after_forward=false", "critic.model.fsdp_config.reshard_after_forward=true")


@pytest.mark.parametrize(
    "override, key",
    [
        ("skip.rollout.enable=true", "skip.rollout.enable"),
        ("actor_rollout_ref.actor.fsdp_config.qat.enable=true", "actor_rollout_ref.actor.fsdp_config.qat.enable"),
        ("transfer_queue.enable=true", "transfer_queue.enable"),
        ("actor_rollout_ref.rollout.trace.backend=weave", "actor_rollout_ref.rollout.trace.backend"),
        ("actor_rollout_ref.actor.checkpoint.strict=false", "actor_rollout_ref.actor.checkpoint.strict"),
        ("actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.enable"),
    ],
)
def test_unwired_sections_name_the_feature(override, key):
    with pytest.raises(ConfigError, match=rf"^`{key.replace('.', '[.]')}` is not supported yet: "):
        _load(override)


@pytest.mark.parametrize(
    "key, expected",
    [
        (
            "algorithm.rollout_is_threshold=2.0",
            "verl renamed it to 'algorithm.rollout_correction.rollout_is_threshold'",
        ),
        ("critic.fsdp_config.param_offload=true", "verl renamed it to 'critic.fsdp.param_offload'"),
        ("+critic.megatron.tensor_model_parallel_size=2", "Megatron engine section"),
        ("actor_rollout_ref.actor.optim.muon_momentum=0.9", "Muon optimizer"),
    ],
)
def test_unknown_key_hints(key, expected):
    with pytest.raises(ConfigError, match=expected):
        _load(key)


def test_plain_defaults_without_verl_on_the_search_path_keep_the_schema_defaults(tmp_path):
    user = tmp_path / "plain.yaml"
    user.write_text("defaults: [ppo_trainer, _self_]\nalgorithm:\n  adv_estimator: grpo\n")
    assert load_config(user, CPU).algorithm.adv_estimator == "grpo"


def test_sapo_taus_under_policy_loss_as_verls_sapo_script_writes_them():
    cfg = _load("+actor_rollout_ref.actor.policy_loss.tau_pos=1.5", "+actor_rollout_ref.actor.policy_loss.tau_neg=2.0")
    assert (cfg.actor_rollout_ref.actor.tau_pos, cfg.actor_rollout_ref.actor.tau_neg) == (1.5, 2.0)
