"""verl's keys that have no effect here: the compat table applied when a config is loaded.

verl's reference config has keys that do nothing in this product, by design: speed or memory
options that compute the same values, settings of engines and features the product lacks. They
are not schema fields; a verl config that sets them still loads. :data:`INERT_FIELDS` lists, per
schema section class, verl's keys of that section with verl's default (the class's instances fix
where a key may appear: every role whose section has the class, so ``*.fsdp_config.seed`` is a key
of the actor's, the reference's, the critic's and the reward model's FSDP section alike). What
each key does is :mod:`verl.config.compat.verl_keys`'s ``NOOP`` / ``UNSUPPORTED`` row (patterns);
:func:`verl_keys` joins both into the table ``{dotted key: (verl default, status, note)}``.

At load (:func:`strip_verl_keys`, before the unknown-key walk and the typed schema):

- a ``noop`` key is accepted at any value (it cannot change results) and dropped;
- an ``unsupported`` key at verl's default is dropped; any other value is the one-line
  "`<key>` is not supported yet: <what to do>" error (``${...}`` values are resolved first);
- a key below a free-form mapping (:class:`Free`, e.g. ``profiler.tool_config``) goes with it.

Nothing here imports torch.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from collections.abc import Callable
from typing import Any

from verl.config.errors import ConfigError, not_supported

__all__ = ["INERT_FIELDS", "Free", "inert_kind", "inert_tree", "strip_verl_keys", "verl_defaults", "verl_keys"]


@dataclasses.dataclass(frozen=True)
class Free:
    """A free-form mapping key (any keys below it) with verl's default."""

    default: Any


_PROFILER = {
    "tool": None,
    "enable": False,
    "all_ranks": False,
    "ranks": [],
    "save_path": None,
    "tool_config": Free({}),
    "relocate_results": False,
    "finish_hook_cmd": None,
    "finish_hook_all_ranks": False,
    "finish_hook_ranks": [],
}
_ROUTER_REPLAY = {"mode": "disabled", "record_file": None, "replay_file": None}
_QAT = {
    "enable": False,
    "mode": "w4a16",
    "group_size": 16,
    "ignore_patterns": ["lm_head", "embed_tokens", "re:.*mlp.gate$"],
    "activation_observer": "static_minmax",
    "quantization_config_path": None,
}
_ENTROPY = {
    "use_torch_compile": True,
    "entropy_from_logits_with_chunking": False,
    "entropy_checkpointing": False,
    "entropy_from_logits_chunk_size": 2048,
    "pad_to_length": False,
}
_SKIP_STAGE = {"enable": False, "dump_dir": "~/.verl/rollout_dump", "steps": [], "action": "cache"}

INERT_FIELDS: dict[str, dict[str, Any]] = {
    "DataConfig": {
        "return_raw_input_ids": False,
        "use_shm": False,
        "image_patch_size": 14,
        "filter_overlong_prompts_workers": 1,
        "image_key": "images",
        "video_key": "videos",
        "return_multi_modal_inputs": True,
        "audio_key": "audios",
        "mm_processor_kwargs": Free({}),
        "function_tool_path": None,
        "sampler": {"class_path": None, "class_name": None},
        "datagen": {"path": None, "name": None},
    },
    "ModelConfig": {
        "hf_config_path": None,
        "use_shm": False,
        "custom_chat_template": None,
        "enable_activation_offload": False,
        "lora_adapter_path": None,
        "use_liger": False,
        "use_fused_kernels": False,
        "fused_kernel_options": {"impl_backend": "torch"},
        "tiled_mlp": {"enabled": False, "num_shards": 4},
        "mtp": {
            "enable": False,
            "enable_train": False,
            "enable_rollout": False,
            "detach_encoder": False,
            "mtp_loss_scaling_factor": 0.1,
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 3,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4,
            "method": "mtp",
            "num_speculative_tokens": 1,
        },
        "lora": {
            "type": "lora",
            "merge": False,
            "rank": 0,
            "alpha": 32,
            "dropout": 0.0,
            "target_modules": ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"],
            "exclude_modules": [],
            "dropout_position": "pre",
            "lora_A_init_method": "xavier",
            "lora_B_init_method": "zero",
            "a2a_experimental": False,
            "dtype": None,
            "adapter_path": None,
            "freeze_vision_model": True,
            "freeze_vision_projection": True,
            "freeze_language_model": True,
        },
    },
    "OptimConfig": {"optimizer": "AdamW", "optimizer_impl": "torch.optim", "override_optimizer_config": Free(None)},
    "FSDPConfig": {
        "wrap_policy": {"min_num_params": 0},
        "forward_prefetch": False,
        "model_dtype": "fp32",
        "use_orig_params": False,
        "seed": 42,
        "full_determinism": False,
        "ulysses_sequence_parallel_size": 1,
        **_ENTROPY,
        "forward_only": False,
        "strategy": "fsdp",
        "dtype": "bfloat16",
        "pad_to_length_bucket": 1024,
        "qat": _QAT,
        "turbo_config": Free({}),
    },
    "CheckpointContentConfig": {"async_save": False, "strict": True},
    "ActorConfig": {
        "freeze_vision_tower": False,
        "use_prefix_grouper": False,
        "use_fused_kernels": False,
        **_ENTROPY,
        "profiler": _PROFILER,
        "router_replay": _ROUTER_REPLAY,
        "qat": _QAT,
        "sum_pi_squared_checkpointing": False,
    },
    "RefConfig": {**_ENTROPY, "profiler": _PROFILER, "router_replay": _ROUTER_REPLAY},
    "AgentLoopConfig": {"num_workers": 8},
    "CheckpointEngineConfig": {"custom_backend_module": None},
    "RolloutConfig": {
        "trace": {
            "backend": None,
            "token2text": False,
            "max_samples_per_step_per_worker": None,
            "project_name": None,
            "experiment_name": None,
        },
        "skip_rollout": False,
        "skip_dump_dir": "/tmp/rollout_dump",
        "enable_rollout_routing_replay": False,
        "profiler": _PROFILER,
        "mtp": Free(None),
        "full_determinism": False,
        "moe_load_balance_metrics_interval": 0,
        "qat": Free(None),
        "disaggregation": {
            "enabled": False,
            "prefill_replicas": 1,
            "decode_replicas": 1,
            "decode_tensor_model_parallel_size": None,
            "transfer_backend": "nixl",
            "bootstrap_port": None,
            "ib_device": None,
        },
    },
    "ActorRolloutRefConfig": {"nccl_timeout": 600},
    "CriticConfig": {"profiler": _PROFILER, "loss_scale_factor": None},
    "RewardModelModelConfig": {
        "external_lib": None,
        "override_config": Free({}),
        "use_shm": False,
        "use_remove_padding": False,
        "use_fused_kernels": False,
    },
    "RewardModelConfig": {
        "max_length": None,
        "n_gpus_per_node": 0,
        "nnodes": 0,
        "reward_loop_source": "register",
        "reward_loop_module_path": None,
        "reward_loop_class_name": None,
        "launch_reward_fn_async": False,
        "sandbox_fusion": {"url": None, "max_concurrent": 64, "memory_limit_mb": 1024},
        "profiler": _PROFILER,
        "ulysses_sequence_parallel_size": 1,
        "use_reward_loop": False,
        "rollout": {
            **{
                k: None
                for k in (
                    "name",
                    "dtype",
                    "gpu_memory_utilization",
                    "enforce_eager",
                    "cudagraph_capture_sizes",
                    "free_cache_engine",
                    "data_parallel_size",
                    "expert_parallel_size",
                    "tensor_model_parallel_size",
                    "max_num_batched_tokens",
                    "max_model_len",
                    "max_num_seqs",
                    "load_format",
                    "limit_images",
                    "enable_chunked_prefill",
                    "enable_prefix_caching",
                    "disable_log_stats",
                    "skip_tokenizer_init",
                    "prompt_length",
                    "response_length",
                )
            },
            "engine_kwargs": Free(None),
        },
    },
    "FilterGroupsConfig": {"max_inflight_gen_batches": 1},
    "AlgorithmConfig": {"use_pf_ppo": False, "pf_ppo": {"reweight_method": "pow", "weight_pow": 2.0}},
    "TrainerConfig": {
        "esi_redundant_time": 0,
        "default_hdfs_dir": None,
        "ray_wait_register_center_timeout": 300,
        "use_legacy_worker_impl": "auto",
        "use_v1": True,
    },
    "TrainerV1Config": {"sync": Free({})},
    "HybridRolloutSwitchConfig": {
        "switch_threshold_ratio": 0.4,
        "adaptive_switch_threshold": True,
        "switch_threshold_step_up": 0.05,
        "switch_threshold_step_down": 0.03,
        "switch_threshold_release_steps": 2,
        "switch_cost_window_size": 3,
    },
    "RootConfig": {
        "transfer_queue": {"enable": False, "metrics": Free({"enabled": False, "port": 0}), "backend": Free({})},
        "skip": {"rollout": _SKIP_STAGE, "rollout_tq": _SKIP_STAGE, "async_rollout": _SKIP_STAGE},
    },
    "RayKwargsConfig": {"timeline_json_file": None},
}
"""Schema section class name -> verl's keys of that section that are not fields (a nested mapping is
a section of verl's, :class:`Free` a free-form mapping key), each with verl's default."""


@functools.lru_cache(maxsize=None)
def _sections(cls: type) -> dict[str, type]:
    """The fields of a schema dataclass that are sections -> their dataclass (``Optional`` unwrapped)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) is typing.Union:
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
        if dataclasses.is_dataclass(tp):
            out[f.name] = tp
    return out


def _walk(cls: type, out: dict[str, Any]) -> None:
    for base in reversed(cls.__mro__):
        out.update(copy.deepcopy(INERT_FIELDS.get(base.__name__, {})))
    for name, section in _sections(cls).items():
        sub: dict[str, Any] = {}
        _walk(section, sub)
        if sub:
            out[name] = sub


@functools.lru_cache(maxsize=None)
def inert_tree(root: type) -> dict[str, Any]:
    """verl's keys without effect below the schema ``root``, nested as they are written (live
    sections hold only their inert keys); leaves are verl's defaults or :class:`Free`."""
    out: dict[str, Any] = {}
    _walk(root, out)
    return out


def _flat(node: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        out.update(_flat(value, path) if isinstance(value, dict) else {path: value})
    return out


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    return copy.deepcopy(node.default) if isinstance(node, Free) else copy.deepcopy(node)


def verl_defaults(root: type | None = None) -> dict[str, Any]:
    """verl's keys without effect below ``root`` (default ``RootConfig``) at verl's defaults, as a
    nested mapping in verl's layout (what ``verl config show --verl-keys`` prints)."""
    return _plain(inert_tree(root or _rl_root()))


def _rl_root() -> type:
    from verl.config.schema import RootConfig

    return RootConfig


@functools.lru_cache(maxsize=None)
def verl_keys(root: type | None = None) -> dict[str, tuple[Any, str, str]]:
    """The compat table: every inert dotted key -> ``(verl default, status, note)``.

    Status is ``noop`` or ``unsupported`` and the note the matching row of
    :mod:`verl.config.compat.verl_keys` (a table test checks that every key has one); a key
    without a row (a root other than ``RootConfig`` whose paths are not verl's) has ``("", "")``.
    """
    from verl.config.compat.verl_keys import key_status

    table = {}
    for path, spec in _flat(inert_tree(root or _rl_root())).items():
        status, note = key_status(_row_path(path)) or ("", "")
        table[path] = (_plain(spec), status, note)
    return table


_ALIASES = {"critic.fsdp.": "critic.model.fsdp_config."}
"""verl's engine spelling of a section -> the spelling whose table rows apply (both hold the same
values: `verl.config.compat.verl_layout` merges them before the table is applied)."""


def _row_path(path: str) -> str:
    for alias, target in _ALIASES.items():
        if path.startswith(alias):
            return target + path[len(alias) :]
    return path


def inert_kind(path: str, root: type | None = None) -> str | None:
    """``"verl"`` for one of verl's keys without effect (or a section of them), ``"free"`` below
    its free-form mappings, None for any other key."""
    node: Any = inert_tree(root or _rl_root())
    for part in path.split("."):
        if isinstance(node, Free):
            return "free"
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return "verl"


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, dict) and isinstance(default, dict):
        from verl.config._tree import merge_trees

        return merge_trees(default, value) == default
    return value == default


def _resolver(tree: dict[str, Any], root: type) -> Callable[[str, Any], Any]:
    """``resolve(path, value)``: a ``${...}`` value resolved in the user's tree over both defaults."""
    view: list[Any] = []

    def resolve(path: str, value: Any) -> Any:
        if not (isinstance(value, str) and "${" in value):
            return value
        from omegaconf import OmegaConf
        from omegaconf.errors import OmegaConfBaseException

        from verl.config._tree import merge_trees

        if not view:
            defaults = merge_trees(
                verl_defaults(root), OmegaConf.to_container(OmegaConf.structured(root), resolve=False)
            )
            view.append(OmegaConf.create(merge_trees(defaults, tree)))
        try:
            return OmegaConf.select(view[0], path)
        except OmegaConfBaseException as e:
            raise ConfigError(f"{path}: {str(e).splitlines()[0]}") from None

    return resolve


def _refuse_unsupported(path: str, value: Any, default: Any) -> None:
    status, note = verl_keys().get(path, (None, "", ""))[1:]
    if status == "unsupported" and not _same(value, default):
        raise not_supported(path, note)


def strip_verl_keys(
    tree: dict[str, Any], root: type | None = None, refuse: Callable[[str, Any, Any], None] | None = None
) -> dict[str, Any]:
    """Checks and removes verl's keys without effect from a tree of user values (in place; returned).

    Args:
        tree: Plain nested dict (composed YAML files and overrides).
        root: The schema the tree describes (default ``RootConfig``; ``verl generate``'s file schema
            holds the RL sections under other names).
        refuse: ``refuse(path, value, verl_default)`` raises for a value that is not accepted;
            default: an ``unsupported`` key off verl's default is "`<key>` is not supported yet: ...".

    Raises:
        ConfigError: From ``refuse``; a scalar where verl has a section; a ``${...}`` value that
            does not resolve.
    """
    root = root or _rl_root()
    snapshot = copy.deepcopy(tree)
    _strip(tree, inert_tree(root), "", refuse or _refuse_unsupported, _resolver(snapshot, root), root)
    return tree


def _strip(
    node: dict[str, Any],
    spec: dict[str, Any],
    prefix: str,
    refuse: Callable[[str, Any, Any], None],
    resolve: Callable[[str, Any], Any],
    cls: type | None,
) -> None:
    """``cls``: the schema section ``node`` describes; None inside a section of verl's only."""
    live = _sections(cls) if cls is not None else {}
    for key in [k for k in node if k in spec]:
        path, value, sub = f"{prefix}.{key}" if prefix else key, node[key], spec[key]
        if isinstance(sub, dict):  # a section: verl's own (inert), or a schema section holding some inert keys
            if isinstance(value, dict):
                _strip(value, sub, path, refuse, resolve, live.get(key))
                if not value and key not in live:
                    del node[key]
            elif key not in live:
                if not (value is None or (isinstance(value, str) and "${" in value)):
                    raise ConfigError(f"{path}: expected a mapping (config section), got {value!r}")
                del node[key]
            continue
        default = sub.default if isinstance(sub, Free) else sub
        refuse(path, resolve(path, value), default)
        del node[key]
