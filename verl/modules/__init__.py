"""Model construction: `create_model(role, cfg)` for actor / ref / critic / reward model.

Also `load_tokenizer`, the critic's `ValueModel`, `ref_policy_context` (LoRA reference policy)
and the shared training-style forwards in `verl.modules.forward`. Names are imported lazily so
that ``import verl.modules.builtin`` (or the ``verl`` CLI) does not pull in transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ValueModel", "create_model", "load_tokenizer", "ref_policy_context", "resolve_model_path"]

_LAZY = {
    "ValueModel": "verl.modules.value_model",
    "create_model": "verl.modules.factory",
    "load_tokenizer": "verl.data.tokenizer",
    "ref_policy_context": "verl.modules.factory",
    "resolve_model_path": "verl.modules.factory",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'verl.modules' has no attribute {name!r}")
