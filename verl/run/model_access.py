"""A run's model config and tokenizer, read with one-line errors that name the key at fault.

Used by the pre-flight checks (`verl.run.preflight`), by `verl.trainer.ppo.builders.build_parts`
(the tokenizer is the first thing a run loads) and by ``verl plan``: a wrong or missing path, or a
hub id with the hub offline, is a `ModelError` naming ``actor_rollout_ref.model.path`` (or the
tokenizer key that was used), never transformers' multi-line ``OSError``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from verl.utils.errors import ModelError

__all__ = ["load_error", "load_run_tokenizer", "needs_remote_code", "read_model_config", "tokenizer_path"]


def _tokenizer_source(cfg: Any) -> tuple[str, str]:
    """(key, path) of the run's tokenizer: ``data.tokenizer``, else the model's tokenizer path, else the model."""
    mc = cfg.actor_rollout_ref.model
    if cfg.data.tokenizer:
        return "data.tokenizer", str(cfg.data.tokenizer)
    if mc.tokenizer_path:
        return "actor_rollout_ref.model.tokenizer_path", str(mc.tokenizer_path)
    return "actor_rollout_ref.model.path", str(mc.path)


def tokenizer_path(cfg: Any) -> str:
    """Where the run's tokenizer comes from (`_tokenizer_source`)."""
    return _tokenizer_source(cfg)[1]


TRUST_KEY = "actor_rollout_ref.model.trust_remote_code"


def needs_remote_code(error: BaseException) -> bool:
    """Whether transformers refused ``error``'s model because it ships its own modelling code."""
    text = str(error)
    return "trust_remote_code" in text or "contains custom code" in text


def load_error(key: str, what: str, path: str, error: Exception, trust_key: str = TRUST_KEY) -> ModelError:
    """One line: the key, what could not be loaded from where, the cause's first line and, for a
    path that is not a local directory, that the hub is offline or needed; for a model that ships
    its own code, the ``trust_key`` that allows it (transformers' own advice names only its
    ``trust_remote_code=True`` argument)."""
    first = str(error).splitlines()[0] if str(error) else ""
    if needs_remote_code(error):
        return ModelError(
            f"{key}: cannot {what} at {path}: the model ships its own Python code (auto_map in its "
            f"config.json); set {trust_key}=true to run that code, only if you trust its source"
        )
    hint = ""
    if not (str(path).startswith("builtin://") or Path(path).exists()):
        offline = any(os.environ.get(v, "") not in ("", "0") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
        hub = (
            "the hub is offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)"
            if offline
            else "a hub id needs the hub or its cache"
        )
        hint = f"; no local directory {path!r} exists and {hub}"
    return ModelError(f"{key}: cannot {what} at {path} ({type(error).__name__}: {first}){hint}")


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
        trust_key = f"{key.rsplit('.', 1)[0]}.trust_remote_code" if "." in key else TRUST_KEY  # the same section
        raise load_error(key, "read the model config", path, e, trust_key) from None


def load_run_tokenizer(cfg: Any) -> Any:
    """The run's tokenizer (``data.tokenizer``, else the model's tokenizer path, else the model).

    Raises:
        ModelError: one line naming the key it came from (see `read_model_config`).
    """
    from verl.modules import load_tokenizer

    key, path = _tokenizer_source(cfg)
    try:
        return load_tokenizer(path, trust_remote_code=cfg.actor_rollout_ref.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises many types for a missing tokenizer
        raise load_error(key, "load the tokenizer", path, e) from None
