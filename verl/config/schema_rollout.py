"""Rollout sections of the typed schema: sampling, multi-turn tools, agent loops and the engine.

Split out of `verl.config.schema` (which re-exports every class here) to keep each schema file
under the house size limit. Each field is documented by the comment under it, as in `schema.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from verl.config.schema_attest import SyncCheckConfig
from verl.config.compat.schema_verl import CheckpointEngineConfig, PrometheusConfig


@dataclass
class SamplingConfig:
    temperature: float = 0.0
    # Validation sampling temperature; 0 = greedy.
    top_k: int = -1
    # Validation top-k filtering; -1 = off.
    top_p: float = 1.0
    # Validation nucleus threshold; 1.0 = off.
    n: int = 1
    # Samples per validation prompt (mean@n, best@n, maj@n).
    do_sample: bool = False
    # False = greedy decoding.


@dataclass
class MultiTurnConfig:
    enable: bool = False
    # Multi-turn rollouts: rows without an ``agent_name`` use the ``tool_agent`` loop (tool calls,
    # user-simulator turns); needs tool_config_path or interaction_config_path.
    max_assistant_turns: Optional[int] = None
    # Assistant turns per trajectory; None = until the budget (response_length) is spent.
    tool_config_path: Optional[str] = None
    # YAML listing tools (class_name, config, tool_schema in OpenAI function format), or
    # builtin://NAME for a shipped one (calculator, code_interpreter, gsm8k).
    function_tool_path: Optional[str] = None
    # Python file or module of plain-function tools (verl's function tools).
    format: str = "hermes"
    # Tool-call format of the model's text: hermes (``<tool_call>{json}</tool_call>``).
    max_user_turns: Optional[int] = None
    # User-simulator (interaction) turns per trajectory; None = no limit.
    max_parallel_calls: int = 1
    # Tool calls executed per assistant turn; extra calls get an error response.
    max_tool_response_length: int = 256
    # Characters of a tool response the model sees; longer ones are truncated.
    tool_response_truncate_side: str = "middle"
    # Which part of a long tool response is cut: left (keep the start) | right (keep the end) | middle.
    interaction_config_path: Optional[str] = None
    # YAML listing interactions (user simulators), or builtin://gsm8k; rows pick one by
    # extra_info.interaction_kwargs.name.
    use_inference_chat_template: bool = False
    # True is not supported: trajectories always keep the sampled ids of every turn.
    tokenization_sanity_check_mode: str = "strict"
    # Compare incremental ids with the chat template's rendering: strict | ignore_strippable | disable.
    token_drift_samples: int = 8
    # Token-drift monitor (not a verl key): tool_agent trajectories per batch whose trained ids are
    # compared with the template's rendering of their final conversation (multi_turn/drift_rate,
    # multi_turn/drift_first_offset); 0 = off.
    template_audit: bool = True
    # Print what the chat template writes at each turn boundary once at start-up (not a verl key).
    num_repeat_rollouts: Optional[int] = None
    # Not supported (null only): repeat rollouts with rollout.n.


@dataclass
class AgentLoopConfig:
    default_agent_loop: str = "single_turn_agent"
    # Agent loop of rows without an ``agent_name`` when multi_turn.enable=false:
    # single_turn_agent | tool_agent.
    agent_loop_config_path: Optional[str] = None
    # Custom agent loops: not supported (null only).
    custom_async_server: Dict[str, Any] = field(default_factory=lambda: {"path": None, "name": None})
    # {path, name} of a custom async server class: not supported (nulls only).


@dataclass
class RolloutConfig:
    name: str = "hf"
    # Rollout engine: hf (CPU/GPU, default) | vllm | sglang (optional extras).
    mode: str = "sync"
    # sync (batched generate_sequences for single-turn batches) | async (every row goes through
    # its agent loop on the engine's token-level request API; same tokens for single turn).
    temperature: float = 1.0
    # Sampling temperature for training rollouts; log-probs are computed under the same temperature.
    top_k: int = -1
    # -1 = no top-k filtering.
    top_p: float = 1.0
    # Nucleus threshold; 1.0 = off.
    do_sample: bool = True
    # False = greedy training rollouts.
    n: int = 1
    # Responses sampled per prompt (the GRPO/RLOO group size).
    prompt_length: Optional[int] = None
    # Tokens; None = data.max_prompt_length.
    response_length: Optional[int] = None
    # Tokens; None = data.max_response_length.
    dtype: Optional[str] = None
    # Rollout compute dtype; None = the model's dtype.
    ignore_eos: bool = False
    # Keep generating after EOS (benchmarking only).
    stop: List[str] = field(default_factory=list)
    # Stop strings, as vLLM's SamplingParams.stop (not a verl key): a response ends once its decoded
    # text (response tokens only, special tokens skipped) contains one; training, validation and
    # verl generate alike. hf: checked after every token, cut on token boundaries (see
    # verl.workers.rollout.stop_strings); vllm: passed to SamplingParams and cut the same way.
    # Single-turn batches only (agent loops: not supported yet). [] = off.
    include_stop_str_in_output: bool = False
    # With stop: keep the stop text in the response (it ends on the token that completes it);
    # False (vLLM's default) cuts the response before the stop text's first token.
    max_num_seqs: int = 1024
    # Sequences generated in one engine batch (hf engine: generation micro-batch).
    gpu_memory_utilization: float = 0.5
    # Fraction of device memory for the engine's KV cache (vllm / sglang).
    tensor_model_parallel_size: int = 1
    # Tensor parallel size of the rollout engine (vllm / sglang).
    max_model_len: Optional[int] = None
    # Prompt + response limit; None = prompt_length + response_length.
    enforce_eager: bool = True
    # vllm / sglang: disable CUDA graphs; hf: false compiles the decode step (torch.compile, once per process).
    free_cache_engine: bool = True
    # Release the KV cache between rollouts.
    calculate_log_probs: bool = True
    # Return the engine's sampling log-probs as rollout_log_probs.
    log_prob_micro_batch_size: Optional[int] = None
    # Deprecated global micro batch for old_log_probs recomputation.
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    # Trajectories per old_log_probs forward per device; None = all at once.
    log_prob_use_dynamic_bsz: bool = False
    # Token-budget micro-batches for old_log_probs recomputation.
    log_prob_max_token_len_per_gpu: int = 16384
    # Token budget (prompt + response) of one old_log_probs micro-batch under log_prob_use_dynamic_bsz.
    seed: Optional[int] = None
    # Sampling seed; None = trainer.seed.
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)
    # Validation sampling.
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    # Multi-turn tool-calling rollouts.
    agent: AgentLoopConfig = field(default_factory=AgentLoopConfig)
    # Agent loops (verl's AgentLoop): which loop a row without agent_name uses.
    multi_stage_wake_up: bool = False
    # A server engine's two-stage memory wake-up (vllm / sglang); the hf engine shares the actor's
    # weights in place, so it has nothing to wake up.
    over_sample_rate: float = 0.0
    # Training rollouts stop once (1 - rate) of the batch's trajectories finished; the rest are
    # aborted with an empty response (masked out). 0 = off. Runs the batch through agent loops.
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)
    # Extra keyword arguments for the engine (vllm / sglang).
    cudagraph_capture_sizes: Optional[List[int]] = None
    # Batch sizes captured as CUDA graphs (vllm / sglang).
    data_parallel_size: int = 1
    # Engine data-parallel size (vllm / sglang).
    expert_parallel_size: int = 1
    # Engine expert-parallel size (vllm / sglang).
    pipeline_model_parallel_size: int = 1
    # Engine pipeline-parallel size (vllm / sglang).
    max_num_batched_tokens: int = 8192
    # Engine token budget per scheduler step (vllm / sglang).
    enable_chunked_prefill: bool = True
    # Engine chunked prefill (vllm / sglang).
    enable_prefix_caching: bool = True
    # Engine prefix caching (vllm / sglang).
    logprobs_mode: str = "processed_logprobs"
    # Which log-probs the engine returns: processed_logprobs (after temperature / top-k / top-p).
    scheduling_policy: str = "fcfs"
    # Engine request scheduling (vllm / sglang).
    load_format: str = "dummy"
    # How the engine loads its first weights (vllm / sglang).
    disable_log_stats: bool = True
    # Engine statistics logging (vllm / sglang).
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    # Weight transfer to the engine.
    sync_check: SyncCheckConfig = field(default_factory=SyncCheckConfig)
    # Weight-sync attestation after every sync to an engine with its own weights (not a verl key;
    # see verl.config.schema_attest).
    skip_tokenizer_init: bool = True
    # Engine skips its own tokenizer (token ids in / out).
    prometheus: PrometheusConfig = field(default_factory=PrometheusConfig)
    # Engine Prometheus metrics.
    quantization: Optional[str] = None
    # Engine weight quantization (fp8, ...).
    quantization_config_file: Optional[str] = None
    # Quantization settings file.
    layered_summon: bool = False
    # Gather LoRA weights layer by layer for the engine.
    nnodes: int = 0
    # Nodes of the rollout's own resource pool (actor_rollout_ref.hybrid_engine=false only);
    # 0 = trainer.nnodes.
    n_gpus_per_node: int = 0
    # Devices per node of that pool (one rollout worker each); 0 = trainer.n_gpus_per_node.
