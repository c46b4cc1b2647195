"""A run's model config and tokenizer, read with one-line errors that name the key at fault.

Used by the pre-flight checks (`verl.trainer.preflight`), by `verl.trainer.builders.build_parts`
(the tokenizer is the first thing a run loads) and by ``verl plan``: a wrong or missing path, or a
hub id with the hub offline, is a `ModelError` naming ``actor_rollout_ref.model.path`` (or the
tokenizer key that was used), never transformers' multi-line ``OSError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verl.utils.errors import ModelError

__all__ = ["load_run_tokenizer", "read_model_config", "tokenizer_path"]


def tokenizer_path(cfg: Any) -> str:
    mc = cfg.actor_rollout_ref.model
    return str(cfg.data.tokenizer or mc.tokenizer_path or mc.path)


def _tok_key(cfg: Any) -> str:
    """The key whose value `tokenizer_path` is."""
    mc = cfg.actor_rollout_ref.model
    return "data.tokenizer" if cfg.data.tokenizer else "actor_rollout_ref.model.tokenizer_path" if mc.tokenizer_path \
        else "actor_rollout_ref.model.path"


def _not_found_hint(path: str) -> str:
    """Why a model / tokenizer path may not load: no such directory, and the hub is off or unreachable."""
    if str(path).startswith("builtin://") or Path(path).exists():
        return ""
    offline = any(os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    hub = "the hub is offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)" if offline else "a hub id needs the hub or its cache"
    return f"; no local directory {path!r} exists and {hub}"


def read_model_config(key: str, path: str, trust_remote_code: bool = False) -> Any:
    """``AutoConfig`` of the model at ``path`` (a directory, hub id or ``builtin://`` name).

    Raises:
        ModelError: one line naming ``key``, the path, the cause's first line and, for a path
            that is not a local directory, that the hub is offline or needed.
    """
    from transformers import AutoConfig

    from verl.modules.factory import resolve_model_path

    try:
        return AutoConfig.from_pretrained(resolve_model_path(path), trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises OSError / ValueError / KeyError
        first = str(e).splitlines()[0] if str(e) else ""
        raise ModelError(f"{key}: cannot read the model config at {path} ({type(e).__name__}: {first})"
                         f"{_not_found_hint(path)}") from None


def load_run_tokenizer(cfg: Any) -> Any:
    """The run's tokenizer (``data.tokenizer``, else the model's tokenizer path, else the model).

    Raises:
        ModelError: one line naming the key it came from (see `read_model_config`).
    """
    from verl.modules import load_tokenizer

    path = tokenizer_path(cfg)
    try:
        return load_tokenizer(path, trust_remote_code=cfg.actor_rollout_ref.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a missing tokenizer
        first = str(e).splitlines()[0] if str(e) else ""
        raise ModelError(f"{_tok_key(cfg)}: cannot load the tokenizer at {path} ({type(e).__name__}: {first})"
                         f"{_not_found_hint(path)}") from None

