"""load_config: presets, defaults composition, Hydra overrides, finalize, round trips, import cost."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import verl.utils.config
from verl.config import (
    PRESET_DIR,
    ConfigError,
    RootConfig,
    config_from_dict,
    config_to_yaml,
    finalize,
    list_presets,
    load_config,
    save_config,
    validate,
)

REPO = Path(__file__).resolve().parents[2]
SMALL = ["data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=4"]


def test_default_config_is_finalized() -> None:
    cfg = load_config()
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.prompt_length, rollout.response_length) == (512, 512)
    assert cfg.critic.enable is True  # default estimator gae needs a critic
    assert cfg.critic.ppo_mini_batch_size == 256  # the actor's
    assert cfg.trainer.default_local_dir == "checkpoints/verl/default"  # interpolation resolved
    assert load_config("quickstart").trainer.default_local_dir == "checkpoints/verl/quickstart"


def test_b11_loss_scale_factor_defaults_to_max_response_length() -> None:
    """B11: the Dr.GRPO constant L defaults to data.max_response_length, never the batch's padded width."""
    assert load_config(None, ["data.max_response_length=4"]).actor_rollout_ref.actor.loss_scale_factor == 4.0
    cfg = load_config(None, ["data.max_response_length=4", "actor_rollout_ref.actor.loss_scale_factor=7"])
    assert cfg.actor_rollout_ref.actor.loss_scale_factor == 7.0


def test_critic_enable_follows_estimator() -> None:
    cfg = load_config(None, [*SMALL, "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2"])
    assert cfg.critic.enable is False


def test_rollout_lengths_follow_data_unless_set() -> None:
    cfg = load_config(None, ["data.max_prompt_length=64", "data.max_response_length=32"])
    assert (cfg.actor_rollout_ref.rollout.prompt_length, cfg.actor_rollout_ref.rollout.response_length) == (64, 32)
    cfg = load_config(None, ["data.max_prompt_length=64", "actor_rollout_ref.rollout.prompt_length=80"])
    assert cfg.actor_rollout_ref.rollout.prompt_length == 80


def test_deprecated_global_micro_becomes_per_gpu() -> None:
    cfg = load_config(
        None,
        [
            *SMALL,
            "trainer.n_gpus_per_node=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size=4",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size=8",
        ],
    )
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert (actor.ppo_micro_batch_size, actor.ppo_micro_batch_size_per_gpu) == (None, 2)
    assert (rollout.log_prob_micro_batch_size, rollout.log_prob_micro_batch_size_per_gpu) == (None, 4)
    assert cfg.critic.forward_micro_batch_size_per_gpu is None


def test_aliases_normalised() -> None:
    cfg = load_config(
        None,
        [
            "actor_rollout_ref.actor.strategy=fsdp",
            "actor_rollout_ref.model.dtype=bf16",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision=fp32",
        ],
    )
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"
    assert cfg.actor_rollout_ref.model.dtype == "bfloat16"
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision == "float32"


def test_finalize_is_idempotent() -> None:
    cfg = load_config("gsm8k_ppo")
    assert finalize(cfg) == cfg


def test_preset_by_name_or_path() -> None:
    assert load_config("gsm8k_grpo") == load_config(PRESET_DIR / "gsm8k_grpo.yaml")
    assert load_config("gsm8k_grpo.yaml") == load_config(str(PRESET_DIR / "gsm8k_grpo.yaml"))


def test_gsm8k_presets_values() -> None:
    grpo = load_config("gsm8k_grpo")
    assert grpo.algorithm.adv_estimator == "grpo" and grpo.actor_rollout_ref.rollout.n == 4
    assert grpo.actor_rollout_ref.actor.use_kl_loss and grpo.critic.enable is False
    assert grpo.data.train_files == ["data/gsm8k/train.parquet"]
    assert grpo.data.val_files == ["data/gsm8k/test.parquet"]
    ppo = load_config("gsm8k_ppo")
    assert ppo.algorithm.adv_estimator == "gae" and ppo.critic.enable is True


PRESETS = list_presets()
# examples/multiturn holds verl's recipe files (tool / interaction configs, and recipes that need
# their tool config from the command line): tests/trainer/ppo/test_multiturn_recipe.py loads them
# examples/multiturn holds verl's recipe YAMLs (Hydra defaults; tested by their own test) and
# examples/sft the SFT / DPO / hybrid configs (their own schema, checked below)
EXAMPLES = (
    sorted(p for p in (REPO / "examples").rglob("*.yaml") if not {"multiturn", "sft"} & set(p.parts))
    if (REPO / "examples").is_dir()
    else []
)
SFT_EXAMPLES = sorted((REPO / "examples" / "sft").glob("*.yaml"))


@pytest.mark.parametrize("path", SFT_EXAMPLES, ids=[p.name for p in SFT_EXAMPLES])
def test_every_sft_example_config_loads(path: Path) -> None:
    from verl.config.sft_loader import load_sft_config

    assert load_sft_config(path) is not None


def test_expected_presets_exist() -> None:
    assert {"quickstart", "gsm8k_grpo", "gsm8k_ppo", "math_grpo"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads_validates_and_round_trips(name: str, tmp_path: Path) -> None:
    """STYLE 17: every preset loads and validates; its saved YAML loads back equal."""
    cfg = load_config(name)
    validate(cfg)
    assert load_config(save_config(cfg, tmp_path / "config.yaml")) == cfg


def _leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else key
        out.update(_leaves(value, path) if isinstance(value, dict) and value else {path: value})
    return out


@pytest.mark.parametrize("name", PRESETS)
def test_presets_hold_only_differences(name: str) -> None:
    """STYLE 11: a preset lists only values that differ from the schema defaults (names excepted)."""
    raw = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text()) or {}
    defaults = _leaves(yaml.safe_load(config_to_yaml(RootConfig())))
    same = [k for k, v in _leaves(raw).items() if k != "trainer.experiment_name" and defaults.get(k) == v]
    assert same == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(REPO)) for p in EXAMPLES])
def test_every_example_config_loads(path: Path) -> None:
    """STYLE 17: every YAML under examples/ loads and validates (none yet is fine)."""
    validate(load_config(path))


def test_override_grammar() -> None:
    cfg = load_config(
        "gsm8k_grpo",
        [
            "data.train_files=[a.parquet,'b c.parquet']",
            "trainer.experiment_name='my run'",
            "data.val_batch_size=null",
            "~data.filter_overlong_prompts",
            "+actor_rollout_ref.model.override_config.attn_implementation=eager",
            "+custom_reward_function.reward_kwargs.scale=2",
            "actor_rollout_ref.rollout.engine_kwargs.enable_prefix_caching=true",
            "trainer.project_name=${trainer.experiment_name}-p",
            "actor_rollout_ref.actor.optim={weight_decay:0.0}",
        ],
    )
    assert cfg.data.train_files == ["a.parquet", "b c.parquet"]
    assert cfg.trainer.experiment_name == "my run" and cfg.trainer.project_name == "my run-p"
    assert cfg.trainer.output_dir == "outputs/my run-p/my run"
    assert cfg.data.val_batch_size is None
    assert cfg.data.filter_overlong_prompts is False  # preset sets True; ~ restores the default
    assert cfg.actor_rollout_ref.model.override_config == {"attn_implementation": "eager"}
    assert cfg.custom_reward_function.reward_kwargs == {"scale": 2}
    assert cfg.actor_rollout_ref.rollout.engine_kwargs == {"enable_prefix_caching": True}
    assert cfg.actor_rollout_ref.actor.optim.weight_decay == 0.0
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6  # a mapping override merges


def test_delete_with_value_checks_current_value() -> None:
    assert load_config("gsm8k_grpo", ["~trainer.test_freq=10"]).trainer.test_freq == -1
    with pytest.raises(ConfigError, match=r"~trainer.test_freq=5: the current value is 10"):
        load_config("gsm8k_grpo", ["~trainer.test_freq=5"])


def test_scalar_and_null_for_string_lists() -> None:
    cfg = load_config(None, ["data.train_files=x.parquet", "trainer.logger=console", "data.val_files=null"])
    assert (cfg.data.train_files, cfg.trainer.logger, cfg.data.val_files) == (["x.parquet"], ["console"], [])


def test_defaults_list_builds_on_preset(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("defaults: [gsm8k_grpo]\ntrainer:\n  total_epochs: 3\n")
    (tmp_path / "run.yaml").write_text("defaults:\n  - base.yaml\n  - _self_\ndata:\n  train_batch_size: 32\n")
    cfg = load_config(tmp_path / "run.yaml", ["actor_rollout_ref.rollout.n=8"])
    assert cfg.algorithm.adv_estimator == "grpo"  # from the preset
    assert cfg.trainer.total_epochs == 3  # from base.yaml
    assert cfg.data.train_batch_size == 32 and cfg.actor_rollout_ref.rollout.n == 8


def test_defaults_cycle_and_base_key_rejected(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("defaults: [b.yaml]\n")
    (tmp_path / "b.yaml").write_text("defaults: [a.yaml]\n")
    with pytest.raises(ConfigError, match="a cycle"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: gsm8k_grpo\n")  # only `defaults` composes
    with pytest.raises(ConfigError, match=r"^unknown key 'base'$"):
        load_config(tmp_path / "c.yaml")


def test_config_from_dict_canonical() -> None:
    d = {"data": {"train_batch_size": 8}, "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 4}}}
    cfg = config_from_dict(d, ["trainer.seed=3"])
    assert (cfg.data.train_batch_size, cfg.trainer.seed) == (8, 3)
    with pytest.raises(ConfigError, match="expected a mapping"):
        config_from_dict(["data"])  # type: ignore[arg-type]


def test_validate_catches_edits_after_loading() -> None:
    cfg = load_config(None, SMALL)
    edited = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, train_batch_size=6))
    with pytest.raises(ConfigError, match=r"^actor_rollout_ref.actor.ppo_mini_batch_size: 4 does not divide"):
        validate(edited)


def test_save_config_round_trip_with_free_form_values(tmp_path: Path) -> None:
    cfg = load_config(
        "math_grpo",
        [
            "+actor_rollout_ref.model.override_config.rope_scaling={type:linear,factor:2.0}",
            "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
        ],
    )
    path = save_config(cfg, tmp_path / "out" / "config.yaml")
    assert path.is_file()
    assert load_config(path) == cfg


def test_utils_reexport() -> None:
    assert verl.utils.config.load_config is load_config


@pytest.mark.e2e  # a fresh interpreter (subprocess)
def test_importing_config_does_not_import_torch() -> None:
    code = (
        "import sys, verl.config, verl.utils.config; verl.config.load_config('gsm8k_grpo', ['data.seed=2']); "
        "assert 'torch' not in sys.modules, 'torch imported'; assert 'ray' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_allowed_names_match_the_registries() -> None:
    """The config's plain name sets agree with the algorithm registries they mirror."""
    pytest.importorskip("torch")
    from verl.algorithms.advantages import ADV_ESTIMATORS
    from verl.algorithms.aggregation import LOSS_AGG_MODES
    from verl.algorithms.kl import KL_PENALTY_TYPES
    from verl.algorithms.policy_loss import POLICY_LOSSES
    from verl.config import choices

    assert set(ADV_ESTIMATORS.names()) == choices.ADV_ESTIMATORS
    assert set(POLICY_LOSSES.names()) == choices.POLICY_LOSS_MODES
    assert set(LOSS_AGG_MODES) == choices.LOSS_AGG_MODES
    assert set(KL_PENALTY_TYPES) == choices.KL_ESTIMATORS


def test_config_file_names_the_experiment(tmp_path: Path) -> None:
    # two different config files never share checkpoints (a resume would load the other model)
    (tmp_path / "my_run.yaml").write_text(
        "algorithm:\n  adv_estimator: grpo\nactor_rollout_ref:\n  rollout:\n    n: 2\n"
    )
    cfg = load_config(tmp_path / "my_run.yaml")
    assert cfg.trainer.experiment_name == "my_run"
    assert cfg.trainer.default_local_dir == "checkpoints/verl/my_run"
    assert load_config(tmp_path / "my_run.yaml", ["trainer.experiment_name=x"]).trainer.experiment_name == "x"
