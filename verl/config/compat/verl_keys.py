"""What each key of verl's reference config does here: the machine-readable compatibility table.

A verl user's script may set any of the 507 keys of verl's ``ppo_trainer.yaml``. Every such key
is in exactly one of these states (tests walk the schema and the table and check it):

- **takes effect** — a schema field the package reads (the default for a field not listed below);
- :data:`NOOP` — not a schema field: accepted at any value and has no effect here, *and* that
  is verl's meaning too (a speed-only optimisation that computes the same values, a setting
  read only by a feature that is off, a GPU-memory setting on CPU); the reason is the row's value;
- :data:`UNSUPPORTED` — not a schema field: accepted at verl's default; any other value is the
  one-line error "`<key>` is not supported yet: <what to do>";
- :data:`OWNED` — owned by another part of the product (the vLLM/SGLang engines, the
  multi-turn agent loop): the owner reads it; with the ``hf`` engine the table says what
  happens (:data:`HF_ENGINE`);
- :data:`INDIRECT` — takes effect, read without an attribute access (e.g. as keyword arguments);
- :data:`CONDITIONAL` — takes effect in some settings and is refused in others; the check
  functions in :mod:`verl.config.compat.verl_keys_checks` say which.

Patterns are ``fnmatch`` globs over dotted key paths (``*`` also matches dots): one row covers
every role. The NOOP / UNSUPPORTED keys and verl's defaults are :mod:`verl.config.compat.verl_inert`'s,
which applies them when a config is loaded; :func:`check_compat` applies the other tables to a
finalized config; :func:`check_unknown_owned` turns a key the owner has no setting for into the
not-supported error instead of "unknown key".
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
from typing import Any

from verl.config.errors import ConfigError, not_supported
from verl.config.compat.verl_keys_layout import merge_layout_tables

__all__ = [
    "CONDITIONAL",
    "HF_ENGINE",
    "INDIRECT",
    "NOOP",
    "OWNED",
    "UNSUPPORTED",
    "check_compat",
    "check_unknown_owned",
    "import_external_lib",
    "key_status",
    "not_supported",
]

_SAME_VALUES = "a speed/memory optimisation in verl that computes the same values; this engine computes them directly"

NOOP: dict[str, str] = {
    "trainer.use_v1": "verl's switch between its legacy and V1 trainers: one loop here either way "
    "(trainer.v1.trainer_mode picks the mode)",
    "trainer.v1.sync": "verl's sync section is empty",
    "trainer.v1.separate_async.hybrid_rollout.switch_*": "read only with hybrid_rollout.enable_switch=true, "
    "which is refused",
    "trainer.v1.separate_async.hybrid_rollout.adaptive_switch_threshold": "read only with "
    "hybrid_rollout.enable_switch=true, which is refused",
    "actor_rollout_ref.rollout.agent.num_workers": "verl runs agent loops in worker processes; "
    "here they are asyncio tasks inside the rollout worker (same trajectories)",
    "*.use_torch_compile": "verl compiles its log-prob/entropy helpers for speed only (" + _SAME_VALUES + ")",
    "*.fsdp_config.forward_prefetch": "overlaps all-gathers with compute (" + _SAME_VALUES + ")",
    "*.fsdp_config.wrap_policy.min_num_params": "FSDP wrap granularity; this engine shards per transformer block "
    "(same values)",
    "*.fsdp_config.use_orig_params": "an FSDP1 flag; FSDP2 always keeps the original parameters",
    "*.fsdp_config.strategy": "read only by verl's new engine (use_legacy_worker_impl=disable); "
    "the role's strategy key decides",
    "*.fsdp_config.dtype": "read only by verl's new engine; the compute dtype is fsdp_config.mixed_precision / "
    "model.dtype",
    "*.fsdp_config.forward_only": "set internally by verl for the reference model; "
    "this engine builds no optimizer for it",
    "*.fsdp_config.seed": "read only by verl's new engine; workers are seeded from trainer.seed",
    "*.entropy_from_logits_with_chunking": "memory optimisation; log-probs and entropy are always chunked here "
    "(actor.logprob_chunk_size)",
    "*.entropy_checkpointing": "memory optimisation (" + _SAME_VALUES + ")",
    "*.use_fused_kernels": "fused log-prob kernels (" + _SAME_VALUES + ")",
    "*.model.fused_kernel_options.impl_backend": "read only when use_fused_kernels (a no-op here)",
    "*.model.use_liger": "Liger kernels (" + _SAME_VALUES + ")",
    "*.use_shm": "copies files to /dev/shm for faster loading; the same files are read",
    "actor_rollout_ref.model.tiled_mlp.*": "tiled MLP is a memory optimisation (" + _SAME_VALUES + ")",
    "critic.model.tiled_mlp.*": "tiled MLP is a memory optimisation (" + _SAME_VALUES + ")",
    "*.checkpoint.async_save": "checkpoints are written synchronously; the same files result",
    "data.return_raw_input_ids": "the batch always holds raw_prompt_ids (the unpadded prompt ids)",
    "data.filter_overlong_prompts_workers": "parallelism of the prompt-length filter; the same prompts are kept",
    "reward_model.launch_reward_fn_async": "overlaps reward computation with log-prob stages in verl; "
    "the same rewards result",
    "reward_model.model.fsdp_config.*": "the reward model is forward-only; its sharding follows the actor's world size",
    "trainer.esi_redundant_time": "read only on Volcano elastic instances (an expiry env var); never set elsewhere",
    "trainer.use_legacy_worker_impl": "selects between verl's two worker implementations; this product has one",
    "trainer.ray_wait_register_center_timeout": "Ray workers register synchronously when the group is created here",
    "algorithm.pf_ppo.*": "read only when algorithm.use_pf_ppo=true (not supported yet: that key errors)",
    "actor_rollout_ref.rollout.mtp": "verl mirrors model.mtp here (model.mtp.* keys are refused when set)",
    "reward_model.model.use_remove_padding": "padding-free forward (" + _SAME_VALUES + ")",
}
"""Documented no-ops: pattern -> why it has no effect (verl's meaning too)."""

UNSUPPORTED: dict[str, str] = {
    "*.fsdp_config.full_determinism": "deterministic kernels are not wired; seeds already make CPU runs reproducible, "
    "leave it false",
    "*.fsdp_config.model_dtype": "set the parameter dtype with actor_rollout_ref.model.dtype (float32 | bfloat16)",
    "*.fsdp_config.ulysses_sequence_parallel_size": "set the role's own key (actor_rollout_ref.actor / ref, critic "
    ".ulysses_sequence_parallel_size)",
    "reward_model.ulysses_sequence_parallel_size": "the reward model's forward is not split along the sequence; "
    "leave it 1",
    "*.router_replay.*": "MoE router replay is not implemented; leave mode=disabled",
    "actor_rollout_ref.actor.freeze_vision_tower": "vision-language models are not supported; "
    "use a text-only causal LM",
    "actor_rollout_ref.actor.use_prefix_grouper": "prefix sharing across a group is not implemented; leave it false",
    "actor_rollout_ref.actor.sum_pi_squared_checkpointing": "sum(pi^2) is computed without gradient here "
    "(old-log-prob stage only), there is nothing to recompute; leave it false",
    "actor_rollout_ref.nccl_timeout": "the collective timeout is torch's default; remove the key",
    "*.model.hf_config_path": "put the config.json in actor_rollout_ref.model.path",
    "*.model.custom_chat_template": "put the template in the tokenizer's chat_template (tokenizer_config.json)",
    "*.model.enable_activation_offload": "activation offload is not implemented; "
    "use enable_gradient_checkpointing=true",
    "*.model.lora_adapter_path": "merge the adapter into the base model first, then train from the merged model",
    "*.model.mtp.*": "multi-token prediction is not implemented; leave model.mtp at its defaults",
    "actor_rollout_ref.rollout.skip_rollout": "rollout replay is not implemented; leave it false",
    "actor_rollout_ref.rollout.skip_dump_dir": "rollout replay is not implemented; remove the key",
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": "MoE routing replay is not implemented; leave it false",
    "data.image_patch_size": "multi-modal data is not supported; use text prompts",
    "data.image_key": "multi-modal data is not supported; use text prompts",
    "data.video_key": "multi-modal data is not supported; use text prompts",
    "data.return_multi_modal_inputs": "multi-modal data is not supported; use text prompts",
    "data.sampler.*": "custom samplers are not wired; data.shuffle / data.seed control the order",
    "data.datagen.*": "dynamic data generation is not wired; prepare the data as files",
    "reward_model.enable_resource_pool": "use reward_model.placement=separate for a reward model with its own pool",
    "reward_model.n_gpus_per_node": "use reward_model.placement=separate (the pool size is the trainer's)",
    "reward_model.nnodes": "use reward_model.placement=separate (the pool size is the trainer's)",
    "reward_model.reward_loop_source": "the reward loop is not implemented; use reward_model.reward_manager",
    "reward_model.reward_loop_module_path": "the reward loop is not implemented; use reward_manager.module.path",
    "reward_model.reward_loop_class_name": "the reward loop is not implemented; use reward_manager.module.name",
    "reward_model.use_reward_loop": "the reward loop is not implemented; leave it false",
    "reward_model.sandbox_fusion.*": "the code sandbox is not wired; score code in custom_reward_function",
    "reward_model.rollout.*": "generative reward models are not supported; use a sequence-classification reward model",
    "reward_model.max_length": "responses are scored at full length (prompt_length + response_length); remove the key",
    "reward_model.model.external_lib": "import the module in custom_reward_function's file instead",
    "reward_model.model.override_config": "edit the reward model's config.json",
    "algorithm.use_pf_ppo": "policy-filtration PPO is not implemented; leave it false",
    "trainer.default_hdfs_dir": "HDFS upload is not wired; copy trainer.default_local_dir yourself",
    "ray_kwargs.timeline_json_file": "Ray timelines are not written; call ray.timeline() yourself",
    "*.optim.override_optimizer_config": "optimizer options beyond lr/betas/eps/weight_decay are not wired; "
    "remove the key",
    "*.optim.optimizer": "only AdamW is wired; leave optimizer=AdamW",
    "*.optim.optimizer_impl": "only torch.optim is wired; leave optimizer_impl=torch.optim",
}
"""Refused unless at the default: pattern -> what to do instead."""

_SERVER_ENGINES = "the vLLM/SGLang engines (verl/workers/rollout/vllm/vllm_config.py)"

OWNED: dict[str, str] = {
    "actor_rollout_ref.rollout.multi_turn.*": "multi-turn tool rollouts (verl/workers/rollout/agent_loop, checks in "
    "config/checks.py)",
    "actor_rollout_ref.rollout.agent.default_agent_loop": "the agent loops (verl/workers/rollout/agent_loop)",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "the agent loops: verl's {name, _target_} YAML "
    "(workers/rollout/agent_loop/verl_api.py)",
    "actor_rollout_ref.rollout.agent.custom_async_server": "the agent loops (refused unless null, config/checks.py)",
    "algorithm.rollout_correction.*": "rollout-correction importance sampling (verl/trainer/ppo/rollout_corr.py)",
    "actor_rollout_ref.rollout.gpu_memory_utilization": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.enforce_eager": "the rollout engines: CUDA graphs of vLLM/SGLang "
    "(verl/workers/rollout/vllm/vllm_config.py), the hf engine's compiled decode step",
    "actor_rollout_ref.rollout.free_cache_engine": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.cudagraph_capture_sizes": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.max_num_batched_tokens": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.enable_chunked_prefill": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.enable_prefix_caching": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.scheduling_policy": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.load_format": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.disable_log_stats": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.multi_stage_wake_up": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.skip_tokenizer_init": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.layered_summon": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.prometheus.*": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.engine_kwargs": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.tensor_model_parallel_size": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.data_parallel_size": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.expert_parallel_size": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.quantization": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.quantization_config_file": _SERVER_ENGINES,
    "actor_rollout_ref.rollout.calculate_log_probs": (
        "the vLLM engine (false: no rollout_log_probs, "
        "verl/workers/rollout/vllm/vllm_rollout.py); rollout_correction needs true"
    ),
}
"""Keys another part of the product owns: pattern -> the owner (the module that reads it)."""

HF_ENGINE: dict[str, tuple[str, str]] = {
    "actor_rollout_ref.rollout.gpu_memory_utilization": (
        "noop",
        "sizes a server engine's KV cache; the hf engine allocates per batch",
    ),
    "actor_rollout_ref.rollout.enforce_eager": (
        "effect",
        "false compiles the hf engine's decode step (torch.compile, "
        "static KV cache: verl/workers/rollout/hf/hf_decode.py); true (default) runs it eagerly",
    ),
    "actor_rollout_ref.rollout.free_cache_engine": (
        "noop",
        "the hf engine's KV cache lives only during generate_sequences",
    ),
    "actor_rollout_ref.rollout.cudagraph_capture_sizes": (
        "noop",
        "CUDA graphs of a server engine; the hf engine runs eagerly",
    ),
    "actor_rollout_ref.rollout.max_num_batched_tokens": (
        "noop",
        "a server engine's scheduler budget; the hf engine batches by max_num_seqs",
    ),
    "actor_rollout_ref.rollout.enable_chunked_prefill": ("noop", "a server engine's prefill scheduling (same tokens)"),
    "actor_rollout_ref.rollout.enable_prefix_caching": ("noop", "a server engine's KV reuse (same tokens)"),
    "actor_rollout_ref.rollout.scheduling_policy": (
        "noop",
        "a server engine's request order; the hf engine runs one batch",
    ),
    "actor_rollout_ref.rollout.load_format": (
        "noop",
        "how a server engine loads its first weights; the hf engine shares the actor's",
    ),
    "actor_rollout_ref.rollout.disable_log_stats": ("noop", "a server engine's statistics log"),
    "actor_rollout_ref.rollout.multi_stage_wake_up": (
        "noop",
        "a server engine's memory wake-up; the hf engine shares the actor's weights",
    ),
    "actor_rollout_ref.rollout.skip_tokenizer_init": ("noop", "the hf engine works on token ids only"),
    "actor_rollout_ref.rollout.layered_summon": ("noop", "the hf engine uses the actor's (LoRA) weights in place"),
    "actor_rollout_ref.rollout.prometheus.*": (
        "unsupported",
        "the hf engine exports no server metrics; use rollout.name=vllm",
    ),
    "actor_rollout_ref.rollout.engine_kwargs": ("noop", "options of the vllm/sglang engines only"),
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (
        "effect",
        "the hf engine splits its decoder blocks over groups of this many "
        "ranks (DTensor; verl/workers/sharding/tensor_parallel.py)",
    ),
    "actor_rollout_ref.rollout.data_parallel_size": (
        "unsupported",
        "the hf engine's data parallelism is the worker count; set it to 1",
    ),
    "actor_rollout_ref.rollout.expert_parallel_size": (
        "unsupported",
        "the hf engine runs one model copy per worker; set it to 1",
    ),
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": (
        "unsupported",
        "the hf engine runs one model copy per worker; set it to 1",
    ),
    "actor_rollout_ref.rollout.quantization": (
        "unsupported",
        "the hf engine samples from the trained weights; use rollout.name=vllm",
    ),
    "actor_rollout_ref.rollout.quantization_config_file": (
        "unsupported",
        "the hf engine samples from the trained weights; use rollout.name=vllm",
    ),
    "actor_rollout_ref.rollout.calculate_log_probs": (
        "noop",
        "the hf engine always returns rollout_log_probs (sampled anyway, no extra cost)",
    ),
}
"""What an :data:`OWNED` engine key does when ``rollout.name=hf``: (noop | unsupported | effect, why / what to do)."""

CONDITIONAL: dict[str, str] = {
    "data.tool_config_path": (
        "read with data.filter_overlong_prompts=true: prompt lengths are measured with the file's tool "
        "schemas rendered (verl/data/rl_dataset.py); None = rollout.multi_turn.tool_config_path"
    ),
    "global_profiler.*": (
        "tool=torch_memory without profiled steps only arms verl's CUDA OOM snapshot: on trainer.device=cpu "
        "there is no CUDA allocator, a no-op (logged); any profiled step, another tool, or a GPU is refused"
    ),
    "*.fsdp_config.param_offload": "FSDP2 CPU offload with >1 worker; on CPU with one worker parameters already live "
    "in host memory (no-op); refused on one GPU",
    "*.fsdp_config.optimizer_offload": "as param_offload",
    "*.fsdp_config.offload_policy": "as param_offload (FSDP2's CPUOffloadPolicy)",
    "*.fsdp_config.fsdp_size": "-1 or the world size shards over all ranks; another size (HSDP) is refused",
    "actor_rollout_ref.hybrid_engine": (
        "true: the engine is colocated with the actor; false: the rollout runs on its own worker group / "
        "resource pool with its own weights, streamed in buckets after every update (LoRA: the base once, then "
        "only the adapter, hf and vllm alike); a rollout pool > 1 needs the Ray backend"
    ),
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "naive (in process when colocated, buckets through the "
    "controller with hybrid_engine=false) is the only backend; others are refused",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes": (
        "> 0; sizes the weight-sync buckets of vLLM (colocated: actor -> engine) and of hybrid_engine=false "
        "(actor -> rollout pool); the colocated hf engine has no buckets to size: it generates with the actor "
        "module (1 worker) or copies it one parameter at a time (FSDP2), never holding more than a bucket"
    ),
    "actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs": "options of verl's other backends: "
    "refused unless empty (naive takes none)",
    "actor_rollout_ref.rollout.nnodes": "sizes the rollout's own pool with hybrid_engine=false; "
    "refused when set with hybrid_engine=true",
    "actor_rollout_ref.rollout.n_gpus_per_node": "as rollout.nnodes",
    "*.rollout_n": "verl mirrors rollout.n; another value is refused",
    "*.checkpoint.save_contents": "model, optimizer and extra are always saved; hf_model also writes the Hugging Face "
    "directory (trainer.save_hf)",
    "*.checkpoint.load_contents": "model, optimizer and extra are always restored together; a subset is refused",
    "actor_rollout_ref.actor.use_remove_padding": "mirrors model.use_remove_padding (a documented no-op)",
    "actor_rollout_ref.rollout.logprobs_mode": "processed_logprobs (the hf engine's: after temperature) is the only "
    "mode; others are refused",
    "actor_rollout_ref.rollout.max_model_len": "hf engine: a length check; server engines: their context length",
    "data.gen_batch_size": (
        "prompts per generation batch under algorithm.filter_groups (DAPO) and per data-loader fetch with "
        "trainer.v1.trainer_mode=separate_async (a divisor of train_batch_size); "
        "otherwise it must equal train_batch_size"
    ),
    "*.optim.warmup_style": "deprecated alias of lr_scheduler_type (both hold the chosen schedule)",
    "*.optim.lr_scheduler_type": "constant | cosine; warmup_style is its deprecated alias "
    "(both hold the chosen schedule)",
    "*.optim.clip_grad": "verl's new-engine spelling of the role's grad_clip; both hold the non-default value",
    "actor_rollout_ref.ref.strategy": "mirrors actor_rollout_ref.actor.strategy; another value is refused",
    "critic.forward_micro_batch_size": "deprecated global size, turned into forward_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": (
        "Ulysses sequence parallelism over sp of the role's ranks (verl/workers/sharding/ulysses.py); sp must divide "
        "the world and needs use_remove_padding (config/sp_checks.py)"
    ),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": "1 (whole sequences) or the actor's "
    "(split like the actor's)",
    "critic.ulysses_sequence_parallel_size": "as actor_rollout_ref.actor.ulysses_sequence_parallel_size",
}
"""Keys whose effect depends on other settings: pattern -> the rule (checked in verl_keys_checks)."""

INDIRECT: dict[str, str] = {
    "actor_rollout_ref.actor.policy_loss.*": "passed to the policy loss as keyword arguments "
    "(dataclasses.asdict of the section)",
    "*.ppo_micro_batch_size": "deprecated global size, turned into ppo_micro_batch_size_per_gpu by finalize",
    "*.log_prob_micro_batch_size": "deprecated global size, turned into log_prob_micro_batch_size_per_gpu by finalize",
}
"""Keys that take effect but are read without an attribute access: pattern -> how."""


merge_layout_tables(
    NOOP, UNSUPPORTED, CONDITIONAL, INDIRECT, HF_ENGINE
)  # verl's current layout: config/compat/verl_keys_layout.py


@functools.lru_cache(maxsize=None)
def _match(path: str, table_id: int) -> str | None:
    table = _TABLES[table_id]
    for pattern in table:
        if fnmatch.fnmatchcase(path, pattern):
            return pattern
    return None


_TABLES = (NOOP, UNSUPPORTED, OWNED, CONDITIONAL, HF_ENGINE, INDIRECT)


def key_status(path: str) -> tuple[str, str] | None:
    """The table's entry for a dotted key: ``(status, note)`` or None (= takes effect).

    Status is ``indirect``, ``conditional``, ``owned``, ``unsupported`` or ``noop`` (looked up
    in that order; the first table with a matching pattern wins).
    """
    for status, table_id in (("indirect", 5), ("conditional", 3), ("owned", 2), ("unsupported", 1), ("noop", 0)):
        pattern = _match(path, table_id)
        if pattern is not None:
            return status, _TABLES[table_id][pattern]
    return None


def _leaves(obj: Any, prefix: str = ""):
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        path = f"{prefix}.{f.name}" if prefix else f.name
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, path)
        else:
            yield path, value


def check_compat(cfg: Any) -> None:
    """Refuses every unsupported setting of a finalized config (one-line error each).

    Args:
        cfg: A finalized ``RootConfig``.

    Raises:
        ConfigError: "`<key>` is not supported yet: <what to do>" for the first key that is
            refused: an :data:`UNSUPPORTED` key off its default, an engine key the ``hf``
            engine cannot honour, or a :data:`CONDITIONAL` key outside its supported range.
    """
    from verl.config.compat.verl_keys_checks import check_conditional
    from verl.config.schema import RootConfig

    defaults = dict(_leaves(RootConfig()))
    hf = cfg.actor_rollout_ref.rollout.name == "hf"
    for path, value in _leaves(cfg):
        status = key_status(path)
        if status is None or value == defaults.get(path, value):
            continue
        kind, note = status
        if kind == "unsupported":
            raise not_supported(path, note)
        if kind == "owned" and hf:
            pattern = _match(path, 4)
            if pattern is not None and HF_ENGINE[pattern][0] == "unsupported":
                raise not_supported(path, HF_ENGINE[pattern][1])
    check_conditional(cfg)


def check_unknown_owned(tree: dict[str, Any], known: Any, prefix: str = "") -> None:
    """Turns a not-yet-added key that another part of the product owns into the not-supported error.

    Args:
        tree: The user's nested values (YAML + overrides), before the unknown-key check.
        known: ``verl.config.introspect.key_kind``-like callable: path -> schema | free | unknown.
        prefix: Dotted path of ``tree``.

    Raises:
        ConfigError: "`<key>` is not supported yet: <owner> has no such setting ..." for an
            unknown key matching :data:`OWNED`.
    """
    for key, value in tree.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if known(path) == "unknown":
            # an unknown section (``algorithm.rollout_correction``) matches ``<section>.*``
            owner = _match(path, 2) or _match(path + ".*", 2)
            if owner is not None:
                raise not_supported(path, f"{OWNED[owner]} has no such setting; remove the key")
            continue
        if isinstance(value, dict):
            check_unknown_owned(value, known, path)


def import_external_lib(tree: dict[str, Any]) -> None:
    """Imports ``actor_rollout_ref.model.external_lib`` (a module name or ``.py`` path) of a raw tree.

    verl users register custom advantage estimators, policy losses and reward managers in such
    a module; importing it before the names are checked makes those names valid config values.
    Workers import it again when they build the model (`verl.modules.factory`).

    Raises:
        ConfigError: The module cannot be imported (one line, naming the key).
    """
    lib = ((tree.get("actor_rollout_ref") or {}).get("model") or {}).get("external_lib")
    if not lib or not isinstance(lib, str) or "${" in lib:
        return
    from verl.utils.import_utils import load_extern_module

    try:
        load_extern_module(lib)
    except Exception as exc:  # noqa: BLE001 - any import failure is a config error here
        raise ConfigError(f"actor_rollout_ref.model.external_lib: cannot import {lib!r}: {exc}") from exc
