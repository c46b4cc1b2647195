"""``distillation.*``: verl's keys and defaults load (off), and the rules of an enabled section."""

from __future__ import annotations

import copy

import pytest

from verl.config import ConfigError, config_from_dict, load_config
from verl.config.schema_distill import resolve_teachers

# verl's distillation section as its generated ppo_trainer config writes it (keys and default values)
VERL_SECTION = {
    "_target_": "verl.workers.config.DistillationConfig",
    "enabled": False,
    "distillation_loss": {
        "_target_": "verl.workers.config.DistillationLossConfig",
        "loss_mode": "k3",
        "topk": 32,
        "use_task_rewards": True,
        "distillation_loss_coef": 1.0,
        "loss_max_clamp": None,
        "log_prob_min_clamp": None,
        "use_policy_gradient": False,
        "policy_loss_mode": "vanilla",
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.2,
    },
    "n_gpus_per_node": 8,
    "nnodes": 0,
    "teacher_models": {
        "teacher_model": {
            "_target_": "verl.workers.config.DistillationTeacherModelConfig",
            "key": None,
            "model_path": None,
            "num_replicas": 0,
            "inference": {
                "_target_": "verl.workers.config.RolloutConfig",
                "name": "${oc.select:actor_rollout_ref.rollout.name}",
                "dtype": "${oc.select:actor_rollout_ref.rollout.dtype}",
                "gpu_memory_utilization": 0.5,
                "enforce_eager": True,
                "cudagraph_capture_sizes": None,
                "free_cache_engine": True,
                "data_parallel_size": 1,
                "expert_parallel_size": 1,
                "tensor_model_parallel_size": 2,
                "max_num_batched_tokens": 8192,
                "max_model_len": None,
                "max_num_seqs": 1024,
                "load_format": "auto",
                "engine_kwargs": {},
                "limit_images": None,
                "enable_chunked_prefill": True,
                "enable_prefix_caching": True,
                "disable_log_stats": True,
                "skip_tokenizer_init": True,
                "prompt_length": "${oc.select:actor_rollout_ref.rollout.prompt_length}",
                "response_length": "${oc.select:actor_rollout_ref.rollout.response_length}",
                "temperature": "${oc.select:actor_rollout_ref.rollout.temperature}",
            },
        }
    },
    "teacher_key": "data_source",
}
ON = ["distillation.enabled=true", "distillation.teacher_models.teacher_model.model_path=builtin://tiny-arithmetic"]
LOSS = "distillation.distillation_loss"


def _section_markers_removed(section: dict) -> dict:
    """The section without its own two ``_target_`` markers (the loader's marker handling is tested elsewhere)."""
    out = copy.deepcopy(section)
    out.pop("_target_")
    out["distillation_loss"].pop("_target_")
    return out


def test_verl_default_section_loads_disabled():
    cfg = config_from_dict({"distillation": _section_markers_removed(VERL_SECTION)})
    d = cfg.distillation
    assert not d.enabled and d.distillation_loss.loss_mode == "k3" and d.distillation_loss.topk == 32
    assert d.teacher_models["teacher_model"]["inference"]["temperature"] == 1.0  # interpolated from the rollout
    # enabling it with only the teacher path set (verl's example scripts): colocated, one teacher
    cfg = config_from_dict({"distillation": _section_markers_removed(VERL_SECTION)}, ON)
    ((key, teacher),) = resolve_teachers(cfg.distillation).items()
    assert key == "default" and teacher.model_path == "builtin://tiny-arithmetic" and teacher.world_size == 0


def test_schema_defaults_match_verl():
    d = load_config(None).distillation
    assert not d.enabled and (d.n_gpus_per_node, d.nnodes, d.teacher_key) == (8, 0, "data_source")
    loss = d.distillation_loss
    assert (loss.loss_mode, loss.topk, loss.use_task_rewards, loss.use_policy_gradient) == ("k3", 32, True, False)
    assert list(d.teacher_models) == ["teacher_model"]


def test_own_pool_splits_into_replicas():
    pool = ["distillation.n_gpus_per_node=2", "distillation.nnodes=1"]
    tp = "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size"
    assert resolve_teachers(load_config(None, [*ON, *pool, f"{tp}=1"]).distillation)["default"].num_replicas == 2
    assert resolve_teachers(load_config(None, [*ON, *pool]).distillation)["default"].num_replicas == 1  # verl's tp 2
    with pytest.raises(ConfigError, match="per_replica_world_size \\(4\\) must divide the teacher pool size"):
        load_config(None, [*ON, *pool, f"{tp}=4"])


def test_several_teachers_drop_the_default_entry():
    t = "+distillation.teacher_models"
    two = [f"{t}.math.key=math", f"{t}.math.model_path=a", f"{t}.code.key=code", f"{t}.code.model_path=b"]
    teachers = resolve_teachers(load_config(None, ["distillation.enabled=true", *two]).distillation)
    assert sorted(teachers) == ["code", "math"] and teachers["math"].model_path == "a"
    with pytest.raises(ConfigError, match="duplicate teacher key 'math'"):
        load_config(None, ["distillation.enabled=true", *two[:2], f"{t}.code.key=math", f"{t}.code.model_path=b"])
    with pytest.raises(ConfigError, match="teacher_models.code.key must be set"):
        load_config(None, ["distillation.enabled=true", *two[:2], f"{t}.code.model_path=b"])
    with pytest.raises(ConfigError, match="sum to 1, but the teacher pool .* has 0"):
        load_config(
            None,
            [
                "distillation.enabled=true",
                *two,
                f"{t}.code.num_replicas=1",
                f"{t}.code.inference.tensor_model_parallel_size=1",
            ],
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([f"{LOSS}.loss_mode=k1"], "needs use_policy_gradient=true"),
        (
            [f"{LOSS}.loss_mode=forward_kl_top"],
            "unknown distillation loss 'forward_kl_top'.*did you mean 'forward_kl_topk'",
        ),
        ([f"{LOSS}.policy_loss_mode=gspo"], "^`distillation.distillation_loss.policy_loss_mode` is not supported yet"),
        ([f"{LOSS}.loss_mode=forward_kl_topk", f"{LOSS}.topk=0"], "topk: must be >= 1"),
        ([f"{LOSS}.loss_max_clamp=0"], "loss_max_clamp: must be > 0"),
        (
            ["+distillation.teacher_models.teacher_model.model_pth=x"],
            "unknown key .*model_pth' \\(did you mean 'model_path'",
        ),
        (["+distillation.teacher_models.teacher_model.inference.dtype=float16"], "must be float32 or bfloat16"),
        ([f"{LOSS}.use_task_rewards=false", "actor_rollout_ref.actor.use_kl_loss=true"], "use_kl_loss=false"),
        (["distillation.teacher_models.teacher_model.inference.max_model_len=8"], "cannot hold the student's prompt"),
        (
            ["+distillation.teacher_models.teacher_model._target_=verl.workers.config.RolloutConfig"],
            "_target_.*does not (match|mark)",
        ),
    ],
)
def test_enabled_section_refuses(overrides: list[str], message: str):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*ON, *overrides])


def test_disabled_section_is_not_checked():
    load_config(None, [f"{LOSS}.loss_mode=k1", "distillation.nnodes=3"])  # verl's defaults and leftovers load while off


def test_teacher_temperature_is_scoring_temperature_one(caplog):
    with caplog.at_level("WARNING"):
        load_config(
            None,
            [
                *ON,
                "actor_rollout_ref.rollout.temperature=0.7",
                "distillation.teacher_models.teacher_model.inference.temperature=0.7",
            ],
        )
    assert "inference.temperature=0.7 has no effect" in caplog.text
