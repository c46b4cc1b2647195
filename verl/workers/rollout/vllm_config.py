"""verl rollout keys → keyword arguments of `vllm.LLM`, with one-line errors for what cannot work.

Every key either reaches vLLM or is refused here before the engine starts (house rule: no
setting is accepted and ignored). What this module decides:

* ``dtype``: None = the actor's parameter dtype; ``bf16``/``fp32``/``fp16`` spellings accepted.
* ``max_model_len``: None = ``prompt_length + response_length``.
* ``seed``: None = vLLM's default seed 0 (the trainer passes ``trainer.seed`` per request anyway).
* ``max_num_batched_tokens``, ``enable_chunked_prefill``, ``enable_prefix_caching``,
  ``kv_cache_dtype``: None = vLLM's default; any value is passed through.
* ``load_format``: ``dummy`` (default: random init, the actor's weights arrive by
  `update_weights` before the first generation) | ``auto`` | ``safetensors`` (the engine loads
  the actor's current weights from disk at start).
* ``tensor_model_parallel_size``: 1 on the CPU backend (the engine lives in the worker); on
  GPU any size vLLM accepts.
* ``engine_kwargs``: only ``engine_kwargs.vllm.*`` (verl's layout); each entry is passed to
  `vllm.LLM` and a name vLLM does not know is refused with the list of close names.
"""

from __future__ import annotations

import difflib
from typing import Any

from torch import nn

__all__ = ["LOAD_FORMATS", "engine_args", "engine_device"]

LOAD_FORMATS = ("dummy", "auto", "safetensors")
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "float32": "float32", "fp32": "float32"}
_PASS_THROUGH = ("max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching", "kv_cache_dtype")


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
    for key in _PASS_THROUGH:
        value = getattr(config, key, None)
        if value is not None:
            args[key] = value
    if device == "cpu" and tp == 1:
        args["distributed_executor_backend"] = "uni"
    if lora_rank > 0:
        args.update(enable_lora=True, max_lora_rank=int(lora_rank), max_loras=1)
    args.update(_engine_kwargs(config))
    return args

