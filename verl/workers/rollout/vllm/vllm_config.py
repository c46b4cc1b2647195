"""verl rollout keys → keyword arguments of `vllm.LLM`, with one-line errors for what cannot work.

Every key either reaches vLLM or is refused here before the engine starts (house rule: no
setting is accepted and ignored). What this module decides:

* ``dtype``: None = the actor's parameter dtype; ``bf16``/``fp32``/``fp16`` spellings accepted.
* ``max_model_len``: None = ``prompt_length + response_length``.
* ``seed``: None = vLLM's default seed 0 (the trainer passes ``trainer.seed`` per request anyway).
* ``max_num_batched_tokens``, ``enable_chunked_prefill``, ``enable_prefix_caching``,
  ``scheduling_policy``, ``disable_log_stats``, ``quantization``, ``cudagraph_capture_sizes``:
  passed through (None = vLLM's default); ``kv_cache_dtype`` (not a verl rollout key) goes in
  ``engine_kwargs.vllm.kv_cache_dtype``.
* ``data_parallel_size``, ``expert_parallel_size``, ``pipeline_model_parallel_size``,
  ``logprobs_mode``, ``skip_tokenizer_init``, ``quantization_config_file``,
  ``multi_stage_wake_up``, ``layered_summon``: only their defaults (refused otherwise).
* ``load_format``: ``dummy`` (default: random init, the actor's weights arrive by
  `update_weights` before the first generation) | ``auto`` | ``safetensors`` (the engine loads
  the actor's current weights from disk at start).
* ``tensor_model_parallel_size``: 1 on the CPU backend (the engine lives in the worker); on
  GPU any size vLLM accepts.
* ``free_cache_engine``: on GPU, vLLM's sleep mode is enabled (the engine sleeps between
  rollouts); vLLM's CPU worker has no sleep mode, so there it is a documented no-op.
* ``engine_kwargs``: only ``engine_kwargs.vllm.*`` (verl's layout); each entry is passed to
  `vllm.LLM` and a name vLLM does not know is refused with the list of close names.

Also the small pieces both engine forms share (`VLLMRollout`'s offline `vllm.LLM` and
`VLLMAsyncTokenEngine`): stop / pad ids, the LoRA slot, and restoring the process state vLLM
changes when it starts.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from verl.workers.rollout.hf.hf_rollout import default_eos_token_ids
from verl.workers.rollout.weight_sync import is_lora_model

__all__ = [
    "LOAD_FORMATS",
    "engine_args",
    "engine_device",
    "eos_and_pad",
    "lora_rank_of",
    "prepare_engine",
    "restore_process_state",
    "vllm_sampling_params",
]

LOAD_FORMATS = ("dummy", "auto", "safetensors")
_DTYPES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "float32": "float32",
    "fp32": "float32",
}
_PASS_THROUGH = (
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "scheduling_policy",
    "disable_log_stats",
    "quantization",
    "cudagraph_capture_sizes",
)
# rollout keys this adapter does not implement yet: any value but the default is refused
_ONLY_DEFAULT = {
    "data_parallel_size": 1,
    "expert_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "logprobs_mode": "processed_logprobs",
    "skip_tokenizer_init": True,
    "quantization_config_file": None,
    "multi_stage_wake_up": False,
    "layered_summon": False,
}


_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


def lora_rank_of(module: nn.Module) -> int:
    """vLLM's ``max_lora_rank`` for a peft actor: the smallest allowed value >= its rank; 0 without LoRA.

    Raises:
        ValueError: a rank above vLLM's largest slot (512).
    """
    if not is_lora_model(module):
        return 0
    rank = max(int(cfg.r) for cfg in module.peft_config.values())
    for slot in _VLLM_LORA_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(
        f"actor_rollout_ref.model.lora_rank={rank} is not supported yet with rollout.name=vllm: at most 512"
    )


def eos_and_pad(module: nn.Module, tokenizer: Any) -> tuple[list[int], int]:
    """Stop ids (as the hf engine's: generation config, then tokenizer) and the pad id."""
    base = module.get_base_model() if is_lora_model(module) else module
    eos = default_eos_token_ids(base, tokenizer)
    pad = getattr(tokenizer, "pad_token_id", None)
    return eos, int(pad if pad is not None else eos[0])


@contextlib.contextmanager
def restore_process_state() -> Iterator[None]:
    """Restore torch's thread count and the global RNG states (python, numpy, torch) on exit.

    Starting vLLM lowers the process's torch threads for serving, and an in-process engine
    re-seeds the global RNGs with its own seed: neither may leak into training.
    """
    import random

    import numpy as np

    threads, state = torch.get_num_threads(), (random.getstate(), np.random.get_state(), torch.get_rng_state())
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(state[0])
        np.random.set_state(state[1])
        torch.set_rng_state(state[2])


def engine_device() -> str:
    """``cpu`` for vLLM's CPU build, else the platform's device type (``cuda``, ...)."""
    from vllm.platforms import current_platform

    return "cpu" if current_platform.is_cpu() else str(current_platform.device_type)


def _err(key: str, why: str) -> ValueError:
    return ValueError(f"actor_rollout_ref.rollout.{key} is not supported yet with rollout.name=vllm: {why}")


def _engine_kwargs(config: Any) -> dict[str, Any]:
    raw = dict(config.engine_kwargs or {})
    other = sorted(k for k in raw if k != "vllm")
    if other:
        raise _err(f"engine_kwargs.{other[0]}", "vLLM options go under engine_kwargs.vllm.<name>")
    extra = dict(raw.get("vllm") or {})
    from vllm import EngineArgs

    known = set(EngineArgs.__dataclass_fields__)
    for name in extra:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise _err(f"engine_kwargs.vllm.{name}", f"vLLM {_version()} has no engine argument '{name}'{hint}")
    return extra


def _version() -> str:
    import vllm

    return str(vllm.__version__)


def _dtype(config: Any, module: nn.Module) -> str:
    if config.dtype is None:
        param = next(module.parameters(), None)
        return str(param.dtype).removeprefix("torch.") if param is not None else "auto"
    if config.dtype not in _DTYPES:
        raise _err("dtype", f"use one of {', '.join(sorted(_DTYPES))} or null, got {config.dtype!r}")
    return _DTYPES[config.dtype]


def engine_args(config: Any, module: nn.Module, lora_rank: int = 0) -> dict[str, Any]:
    """Keyword arguments of `vllm.LLM` for the rollout section ``config`` (see module docstring).

    Args:
        config: a `RolloutConfig`.
        module: the actor (its dtype is the default ``dtype``).
        lora_rank: the adapter rank when the actor is a LoRA model (enables vLLM's LoRA).

    Returns:
        A dict including ``load_format`` (for the caller to pop).

    Raises:
        ValueError: a key the installed vLLM or this device cannot honour (one line, names it).
    """
    device = engine_device()
    tp = int(config.tensor_model_parallel_size)
    if tp != 1 and device == "cpu":
        raise _err("tensor_model_parallel_size", f"the CPU engine runs inside its worker, so it must be 1 (got {tp})")
    load_format = str(getattr(config, "load_format", None) or "dummy")
    if load_format not in LOAD_FORMATS:
        raise _err("load_format", f"use one of {', '.join(LOAD_FORMATS)}, got {load_format!r}")
    max_model_len = config.max_model_len or (int(config.prompt_length) + int(config.response_length))
    if config.max_num_seqs < 1:
        raise _err("max_num_seqs", f"must be >= 1, got {config.max_num_seqs}")
    args: dict[str, Any] = {
        "tensor_parallel_size": tp,
        "gpu_memory_utilization": float(config.gpu_memory_utilization),
        "enforce_eager": bool(config.enforce_eager),
        "max_num_seqs": int(config.max_num_seqs),
        "max_model_len": int(max_model_len),
        "dtype": _dtype(config, module),
        "seed": int(config.seed) if config.seed is not None else 0,
        "load_format": load_format,
    }
    for key, default in _ONLY_DEFAULT.items():
        if getattr(config, key, default) != default:
            raise _err(key, f"this adapter supports only {default!r} (got {getattr(config, key)!r})")
    for key in _PASS_THROUGH:
        value = getattr(config, key, None)
        if value is not None:
            args[key] = value
    if device == "cpu" and tp == 1:
        args["distributed_executor_backend"] = "uni"
    if device != "cpu" and config.free_cache_engine:
        args["enable_sleep_mode"] = True  # free_cache_engine: sleep between rollouts (no sleep mode on CPU)
    if lora_rank > 0:
        args.update(enable_lora=True, max_lora_rank=int(lora_rank), max_loras=1)
    args.update(_engine_kwargs(config))
    return args


def prepare_engine(
    config: Any, module: nn.Module, lora_rank: int = 0, tokenizer: Any = None
) -> tuple[dict[str, Any], str]:
    """Everything a `vllm.LLM` / `AsyncEngineArgs` needs: keyword arguments and its model directory.

    The directory (in RAM when ``/dev/shm`` exists) holds the actor's config, plus its current
    weights for ``load_format`` auto / safetensors. Tokenization stays with verl
    (``skip_tokenizer_init``: requests carry ids), sampling defaults come only from verl
    (``generation_config="vllm"``), log-probs follow verl's definition (``processed_logprobs``:
    after temperature), and the worker extension provides the in-place weight reload. With
    ``rollout.stop`` the engine must detokenize: the ``tokenizer`` is saved next to the config
    and ``skip_tokenizer_init`` is off.

    Returns:
        (keyword arguments, model directory to delete when the engine closes).

    Raises:
        ValueError: see `engine_args`; ``rollout.stop`` without a tokenizer.
    """
    import atexit
    import os
    import shutil
    import tempfile

    from verl.workers.rollout.vllm.vllm_weights import hf_config_of
    from verl.workers.rollout.weight_sync import plan_checkpoint_buckets

    args = engine_args(config, module, lora_rank)
    root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    model_dir = tempfile.mkdtemp(prefix="verl-vllm-model-", dir=root)
    # an engine nobody closes (a run's last one, a Ray worker's) must not leave this RAM directory behind
    atexit.register(shutil.rmtree, model_dir, True)
    hf_config = hf_config_of(module)
    hf_config.save_pretrained(model_dir)
    if args["load_format"] != "dummy":
        from safetensors.torch import save_file

        state = {k: v.contiguous() for bucket in plan_checkpoint_buckets(module).iter(module) for k, v in bucket}
        if getattr(hf_config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)  # safetensors refuses shared storage; vLLM ties it again
        save_file(state, os.path.join(model_dir, "model.safetensors"))
    detokenize = bool(getattr(config, "stop", None))
    if detokenize:
        if tokenizer is None:
            raise ValueError("actor_rollout_ref.rollout.stop with rollout.name=vllm needs the actor's tokenizer")
        tokenizer.save_pretrained(model_dir)  # vLLM matches stop strings on its own detokenized text
    args.update(
        model=model_dir,
        skip_tokenizer_init=not detokenize,
        generation_config="vllm",
        logprobs_mode="processed_logprobs",
        worker_extension_cls="verl.workers.rollout.vllm.vllm_worker_ext.VerlWorkerExtension",
    )
    return args, model_dir


def vllm_sampling_params(
    params: Any,
    max_tokens: int,
    stop_token_ids: list[int],
    seed: int | None,
    ignore_eos: bool,
    logprobs: bool,
    stop: list[str] | None = None,
    include_stop_str_in_output: bool = False,
) -> Any:
    """vLLM ``SamplingParams`` of one request from verl's `SamplingParams` (greedy → temperature 0).

    Args:
        params: resolved `verl.workers.rollout.sampling.SamplingParams`.
        max_tokens: response length limit.
        stop_token_ids: ids that end the response (included in it).
        seed: per-request seed, or None for the engine's generator.
        ignore_eos: never stop on EOS (``rollout.ignore_eos``).
        logprobs: return the sampled token's log-prob (``rollout.calculate_log_probs``).
        stop: stop strings (``rollout.stop``); any turns on detokenization, which vLLM's string
            matching needs.
        include_stop_str_in_output: ``rollout.include_stop_str_in_output``.
    """
    from vllm import SamplingParams as VSamplingParams

    return VSamplingParams(
        n=1,
        max_tokens=int(max_tokens),
        seed=seed,
        detokenize=bool(stop),
        temperature=0.0 if params.greedy else float(params.temperature),
        top_k=int(params.top_k) if params.top_k > 0 else 0,
        top_p=float(params.top_p),
        stop_token_ids=[] if ignore_eos else list(stop_token_ids),
        ignore_eos=bool(ignore_eos),
        logprobs=0 if logprobs else None,
        **({"stop": list(stop), "include_stop_str_in_output": bool(include_stop_str_in_output)} if stop else {}),
    )
