"""Every key of verl's reference PPO config is known, and no schema field is silently ignored."""

from __future__ import annotations

import re
import typing
from functools import lru_cache
from pathlib import Path

import pytest

from verl.config import ConfigError, load_config
from verl.config._tree import merge_trees, nested
from verl.config.compat.verl_inert import strip_verl_keys, verl_keys
from verl.config.compat.verl_keys import CONDITIONAL, HF_ENGINE, INDIRECT, NOOP, OWNED, UNSUPPORTED, key_status
from verl.config.introspect import _is_section, _strip_optional, all_keys, key_kind, type_at
from verl.config.schema import RootConfig

DATA = Path(__file__).parent / "data" / "verl_ppo_trainer_keys.txt"
PACKAGE = Path(__file__).resolve().parents[2] / "verl"
SCHEMA_FILES = {
    "schema.py",
    "schema_rollout.py",
    "schema_verl.py",
    "verl_keys.py",
    "verl_keys_layout.py",
    "verl_inert.py",
}


def _verl_keys() -> list[str]:
    return [line.strip() for line in DATA.read_text().splitlines() if line.strip()]


def test_reference_key_list_is_complete():
    keys = _verl_keys()
    assert len(keys) == 507 and len(set(keys)) == 507


def test_every_verl_key_is_known_or_owned():
    missing = [k for k in _verl_keys() if key_kind(k) == "unknown" and key_status(k) is None]
    assert missing == []


def test_owned_key_not_in_schema_yet_gives_not_supported_error():
    unknown_owned = [k for k in _verl_keys() if key_kind(k) == "unknown"]
    for key in unknown_owned[:3]:
        with pytest.raises(ConfigError, match=rf"^`{re.escape(key.rsplit('.', 1)[0])}[^`]*` is not supported yet: "):
            load_config(None, [f"{key}=1"])


def _leaves() -> list[str]:
    return [k for k in all_keys() if not _is_section(type_at(k))]


@lru_cache(maxsize=1)
def _package_source() -> str:
    return "\n".join(p.read_text() for p in PACKAGE.rglob("*.py") if p.name not in SCHEMA_FILES)


def test_every_schema_field_is_read_or_declared():
    """A field nothing reads must be declared no-op / unsupported / owned / conditional."""
    source = _package_source()

    def read(name: str) -> bool:  # an attribute access, or getattr(obj, "name", ...)
        return bool(re.search(rf"\.{name}\b|getattr\([^()]*[\"']{name}[\"']", source))

    silent = [k for k in _leaves() if key_status(k) is None and not read(re.escape(k.rsplit(".", 1)[1]))]
    assert silent == []


def test_table_patterns_all_match_a_key():
    keys = _leaves() + _verl_keys() + list(verl_keys())
    import fnmatch

    for table in (NOOP, UNSUPPORTED, OWNED, CONDITIONAL, HF_ENGINE, INDIRECT):
        stale = [p for p in table if not any(fnmatch.fnmatchcase(k, p) for k in keys)]
        assert stale == [], stale


def _non_default(path: str, default):
    """A value of the field's type that differs from its default (None when there is none to pick)."""
    tp = _strip_optional(type_at(path))
    origin = typing.get_origin(tp)
    if tp is bool:
        return not default
    if tp is int:
        return (default or 0) + 2
    if tp is float:
        return (default or 0.0) + 0.25
    if tp is str:
        return "somethingelse"
    if origin is list:
        return [7] if typing.get_args(tp) == (int,) else ["other"]
    if origin is dict or tp is dict:
        return {"x": 1}
    return None


def _default(path: str):
    obj = RootConfig()
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _set(cfg, path: str, value) -> None:
    obj = cfg
    *parents, leaf = path.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, leaf, value)


def _other_value(default):
    """A value that differs from verl's default (inert keys are not typed: any value is loadable)."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 2
    if isinstance(default, list):
        return ["other"]
    if isinstance(default, dict):
        return {"x": 1}
    return "somethingelse"


def test_every_unsupported_key_gives_the_one_line_error():
    checked = 0
    for key, (default, status, _) in verl_keys().items():
        if status != "unsupported":
            continue
        with pytest.raises(ConfigError) as err:
            strip_verl_keys(nested(key, _other_value(default)))
        msg = str(err.value)
        assert msg.startswith(f"`{key}` is not supported yet: ") and "\n" not in msg, msg
        checked += 1
    assert checked >= 60


def test_inert_keys_load_at_verl_default_and_noop_keys_at_any_value():
    tree = {}
    for key, (default, status, _) in verl_keys().items():
        tree = merge_trees(tree, nested(key, default if status == "unsupported" else _other_value(default)))
    left = strip_verl_keys(tree)

    def leaves(node, prefix=""):
        return [
            k
            for key, v in node.items()
            for k in (leaves(v, f"{prefix}{key}.") if isinstance(v, dict) else [prefix + key])
        ]

    assert (
        leaves(left) == [] and "transfer_queue" not in left and "profiler" not in left["critic"]
    )  # live sections stay, empty
    cfg = load_config(
        None,
        [
            "actor_rollout_ref.actor.use_torch_compile=false",
            "critic.profiler.tool=nsys",
            "actor_rollout_ref.ref.fsdp_config.model_dtype=fp32",
            "transfer_queue.enable=false",
            "+actor_rollout_ref.actor.profiler.tool_config.nsys.discrete=true",
        ],
    )
    assert not hasattr(cfg.actor_rollout_ref.actor, "use_torch_compile") and not hasattr(cfg, "transfer_queue")


@pytest.mark.parametrize(
    "role",
    [
        "actor_rollout_ref.actor.fsdp_config",
        "actor_rollout_ref.ref.fsdp_config",
        "critic.model.fsdp_config",
        "reward_model.model.fsdp_config",
        "critic.fsdp",
    ],
)
def test_wildcard_rows_hold_for_every_role(role):
    """``*.fsdp_config.model_dtype`` (unsupported) and ``*.fsdp_config.forward_prefetch`` (no-op) in every FSDP
    section."""
    load_config(None, [f"{role}.model_dtype=fp32", f"{role}.forward_prefetch=true"])
    with pytest.raises(ConfigError, match=rf"^`{re.escape(role)}.model_dtype` is not supported yet: "):
        load_config(None, [f"{role}.model_dtype=bf16"])


def test_inert_key_only_where_verl_has_it():
    for key in ("data.use_torch_compile", "trainer.profiler.enable", "reward_model.model.use_liger"):
        with pytest.raises(ConfigError, match=rf"^unknown key '{re.escape(key)}'"):
            load_config(None, [f"{key}=false"])
    with pytest.raises(ConfigError, match="did you mean 'actor_rollout_ref.actor.profiler.enable'"):
        load_config(None, ["actor_rollout_ref.actor.profiler.enabel=false"])


def test_unsupported_value_from_an_interpolation_is_resolved_first():
    # verl's rollout profiler follows the actor's: ${oc.select:actor_rollout_ref.actor.profiler.enable,false}
    follow = "actor_rollout_ref.rollout.profiler.enable=${oc.select:actor_rollout_ref.actor.profiler.enable,false}"
    load_config(None, [follow])
    with pytest.raises(ConfigError, match=r"^`actor_rollout_ref.rollout.profiler.enable` is not supported yet: "):
        strip_verl_keys(
            merge_trees(
                nested("actor_rollout_ref.rollout.profiler.enable", "${actor_rollout_ref.model.use_remove_padding}"), {}
            )
        )


def test_unsupported_key_on_the_command_line():
    with pytest.raises(ConfigError, match=r"^`actor_rollout_ref.actor.profiler.enable` is not supported yet: "):
        load_config(None, ["actor_rollout_ref.actor.profiler.enable=true"])


def test_noop_keys_load_at_non_default_values():
    for key in [
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.8",
        "actor_rollout_ref.rollout.enforce_eager=false",
        "actor_rollout_ref.rollout.free_cache_engine=false",
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.actor.fsdp_config.fsdp_size=1",
    ]:
        load_config(None, [key])


@pytest.mark.parametrize(
    "override, key",
    [
        ("actor_rollout_ref.rollout.n_gpus_per_node=2", "actor_rollout_ref.rollout.n_gpus_per_node"),
        (
            "actor_rollout_ref.actor.checkpoint.save_contents=[model]",
            "actor_rollout_ref.actor.checkpoint.save_contents",
        ),
        ("actor_rollout_ref.actor.rollout_n=3", "actor_rollout_ref.actor.rollout_n"),
        ("actor_rollout_ref.rollout.logprobs_mode=raw_logprobs", "actor_rollout_ref.rollout.logprobs_mode"),
    ],
)
def test_conditional_refusals(override, key):
    with pytest.raises(ConfigError, match=rf"^`{re.escape(key)}` is not supported yet: "):
        load_config(None, [override])


def test_offload_and_fsdp_size_rules():
    with pytest.raises(ConfigError, match="fsdp_size` is not supported yet"):
        load_config(None, ["trainer.n_gpus_per_node=4", "actor_rollout_ref.actor.fsdp_config.fsdp_size=2"])
    cfg = load_config(
        None,
        [
            "trainer.n_gpus_per_node=4",
            "actor_rollout_ref.actor.fsdp_config.fsdp_size=4",
            "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
        ],
    )
    assert (
        cfg.actor_rollout_ref.actor.fsdp_config.param_offload
        and cfg.actor_rollout_ref.actor.fsdp_config.optimizer_offload
    )


def test_aliases_translate():
    cfg = load_config(
        None,
        [
            "actor_rollout_ref.actor.optim.warmup_style=cosine",
            "actor_rollout_ref.actor.optim.clip_grad=0.5",
            "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        ],
    )
    optim = cfg.actor_rollout_ref.actor.optim
    assert optim.lr_scheduler_type == "cosine" and optim.warmup_style == "cosine"
    assert cfg.actor_rollout_ref.actor.grad_clip == 0.5
    assert cfg.trainer.save_hf is True
    with pytest.raises(ConfigError, match="disagree"):
        load_config(
            None,
            [
                "critic.optim.warmup_style=cosine",
                "critic.optim.lr_scheduler_type=constant",
                "critic.optim.lr_scheduler_type=cosine",
                "critic.grad_clip=0.3",
                "critic.optim.clip_grad=0.4",
            ],
        )


def test_global_profiler_torch_memory_without_steps_is_a_cpu_noop_else_refused():
    """verl's multi-turn recipes set global_profiler.tool=torch_memory with no steps: in verl that
    only arms a CUDA OOM snapshot, so on CPU it is accepted as a no-op; anything that would
    record something is the one-line not-supported error."""
    from verl.config import ConfigError, load_config

    ok = [
        "global_profiler.tool=torch_memory",
        "global_profiler.save_path=./mem",
        "global_profiler.global_tool_config.torch_memory.stack_depth=32",
    ]
    assert load_config("quickstart", ok).global_profiler.tool == "torch_memory"
    for bad in (["global_profiler.tool=nsys"], [*ok, "global_profiler.steps=[1]"]):
        with pytest.raises(ConfigError, match=r"`global_profiler.tool` is not supported yet"):
            load_config("quickstart", bad)
