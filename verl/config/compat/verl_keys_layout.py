"""The compatibility-table rows of verl's current layout (merged into :mod:`verl.config.compat.verl_keys`).

The keys verl added with its engine / reward / skip-manager layout: each row says what the key
does here, in the same four kinds as the main table (no-op with verl's meaning, not supported
unless at verl's default, conditional, read indirectly). They are merged in front of the main
table's rows, so a row here wins over a broader pattern there.
"""

from __future__ import annotations

__all__ = [
    "LAYOUT_CONDITIONAL",
    "LAYOUT_HF_ENGINE",
    "LAYOUT_INDIRECT",
    "LAYOUT_NOOP",
    "LAYOUT_UNSUPPORTED",
    "merge_layout_tables",
]

_READ_WITH = "read only with {}, which is refused unless at verl's default"

LAYOUT_NOOP: dict[str, str] = {
    "*.profiler.*": "per-role profiler settings are read only with profiler.enable=true (refused: not wired)",
    "*.fsdp_config.entropy_from_logits_chunk_size": "chunk of verl's chunked entropy; entropy is always chunked here "
    "(the same values)",
    "*.entropy_from_logits_chunk_size": "chunk of verl's chunked entropy; entropy is always chunked here "
    "(the same values)",
    "critic.fsdp.entropy_from_logits_chunk_size": "the critic computes no entropy",
    "*.pad_to_length": "pads packed batches for verl's compiled kernels; padding is masked (the same values)",
    "*.pad_to_length_bucket": "the bucket of pad_to_length (the same values)",
    "*.turbo_config": "read only by verl's turbo FSDP implementation; FSDP2 here is the native one",
    "*.qat.*": _READ_WITH.format("qat.enable=true"),
    "actor_rollout_ref.rollout.qat": "verl mirrors the actor's fsdp_config.qat here (that key decides)",
    "*.model.lora.*": _READ_WITH.format("model.lora.rank > 0 (verl's engine-side LoRA; FSDP LoRA is model.lora_rank)"),
    "actor_rollout_ref.rollout.disaggregation.*": _READ_WITH.format("rollout.disaggregation.enabled=true"),
    "actor_rollout_ref.rollout.trace.*": _READ_WITH.format("rollout.trace.backend"),
    "skip.*": _READ_WITH.format("skip.<stage>.enable=true"),
    "transfer_queue.metrics": _READ_WITH.format("transfer_queue.enable=true"),
    "transfer_queue.backend": _READ_WITH.format("transfer_queue.enable=true"),
    "reward.reward_model.rollout": (
        "the engine verl's reward loop serves the reward model with; the reward model "
        "(model_path) is scored by the reward-model worker here (the same scores)"
    ),
    "reward.num_workers": "verl's reward-loop worker count: here the scoring threads of streaming rewards "
    "(the same scores)",
    "reward.reward_model.n_gpus_per_node": "read only with reward.reward_model.enable_resource_pool=true",
    "reward.reward_model.nnodes": "read only with reward.reward_model.enable_resource_pool=true",
    "data.function_tool_path": "verl mirrors rollout.multi_turn.function_tool_path here (that key decides)",
    "data.audio_key": "the audio column of multi-modal data; text prompts here have none",
    "critic.loss_scale_factor": "verl mirrors actor.loss_scale_factor here; the critic's loss is token-mean "
    "(no scale factor)",
}
"""Documented no-ops (verl's meaning too), or read only by a setting refused elsewhere."""

LAYOUT_UNSUPPORTED: dict[str, str] = {
    "*.profiler.enable": "per-role profilers are not wired; profile with py-spy (installed) or torch.profiler around "
    "`verl train`",
    "*.qat.enable": "quantization-aware training is not implemented; leave qat.enable=false",
    "*.model.lora.rank": "verl's engine-side LoRA is not implemented; set model.lora_rank / lora_alpha (FSDP LoRA)",
    "actor_rollout_ref.rollout.disaggregation.enabled": "prefill/decode disaggregation is not implemented; "
    "leave it false",
    "actor_rollout_ref.rollout.trace.backend": "rollout tracing is not wired; "
    "use trainer.rollout_data_dir to dump rollouts",
    "actor_rollout_ref.rollout.full_determinism": "deterministic engine kernels are not wired; "
    "seeds make hf rollouts reproducible",
    "actor_rollout_ref.rollout.moe_load_balance_metrics_interval": "MoE load-balance metrics are not implemented; "
    "leave it 0",
    "actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module": "custom checkpoint-engine backends are not "
    "supported; naive is built in",
    "algorithm.filter_groups.max_inflight_gen_batches": "overlapped generation batches are not implemented; leave it 1",
    "skip.*.enable": "verl's skip manager (replaying dumped stage outputs) is not implemented; leave enable=false",
    "data.mm_processor_kwargs": "multi-modal data is not supported; use text prompts",
    "transfer_queue.enable": "verl's TransferQueue data plane is not implemented; leave it off",
    "*.checkpoint.strict": "only strict loading (verl's default) is wired",
}
"""Refused unless at the default: pattern -> what to do instead."""

LAYOUT_INDIRECT: dict[str, str] = {
    "reward.*": "migrated onto reward_model.* / custom_reward_function.* / reward_manager.* "
    "(config/compat/reward_layout.py)",
    "critic.fsdp.*": "verl's engine spelling of critic.model.fsdp_config.*: both hold the same values "
    "(config/compat/verl_layout.py)",
}
"""Keys that take effect but are read without an attribute access: pattern -> how."""

_LAYOUT_ONLY = (
    "a server engine's model-parallel layout (where the weights live, not which tokens are sampled); "
    "the hf engine runs one whole model copy per worker"
)
LAYOUT_HF_ENGINE: dict[str, tuple[str, str]] = {
    "actor_rollout_ref.rollout.tensor_model_parallel_size": (
        "effect",
        "the hf engine splits its decoder blocks over groups of "
        "this many ranks (DTensor; verl/workers/sharding/tensor_parallel.py)",
    ),
    "actor_rollout_ref.rollout.pipeline_model_parallel_size": ("noop", _LAYOUT_ONLY),
    "actor_rollout_ref.rollout.expert_parallel_size": ("noop", _LAYOUT_ONLY),
    "actor_rollout_ref.rollout.prometheus.enable": (
        "unsupported",
        "the hf engine exports no server metrics; use rollout.name=vllm",
    ),
    "actor_rollout_ref.rollout.prometheus.*": (
        "noop",
        "read only with rollout.prometheus.enable=true (refused with hf)",
    ),
    "actor_rollout_ref.rollout.data_parallel_size": (
        "noop",
        "a server engine's replica count; the hf engine's data parallelism is the worker count",
    ),
}
"""What these engine keys do with ``rollout.name=hf`` (replacing the main HF_ENGINE rows)."""

LAYOUT_CONDITIONAL: dict[str, str] = {}
"""Keys whose effect depends on other settings (none yet)."""


def merge_layout_tables(
    noop: dict[str, str],
    unsupported: dict[str, str],
    conditional: dict[str, str],
    indirect: dict[str, str],
    hf_engine: dict[str, tuple[str, str]],
) -> None:
    """Puts this module's rows in front of the main table's (in place): a row here wins."""
    merged_hf = {**LAYOUT_HF_ENGINE, **{k: v for k, v in hf_engine.items() if k not in LAYOUT_HF_ENGINE}}
    hf_engine.clear()
    hf_engine.update(merged_hf)
    for table, rows in (
        (noop, LAYOUT_NOOP),
        (unsupported, LAYOUT_UNSUPPORTED),
        (conditional, LAYOUT_CONDITIONAL),
        (indirect, LAYOUT_INDIRECT),
    ):
        merged = {**rows, **{k: v for k, v in table.items() if k not in rows}}
        table.clear()
        table.update(merged)
