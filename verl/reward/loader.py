"""Loading a user's reward function from a Python file (``custom_reward_function.*`` config).

Only the file the user configured is executed (as a fresh module); nothing else is imported or
evaluated on the user's behalf.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from verl.utils.errors import RewardFunctionError


class RewardFileNotFound(RewardFunctionError, FileNotFoundError):
    """``custom_reward_function.path`` does not exist."""


class RewardFunctionNotFound(RewardFunctionError, AttributeError):
    """``custom_reward_function.name`` is not defined in the file."""


class RewardFunctionNotCallable(RewardFunctionError, TypeError):
    """``custom_reward_function.name`` names something that is not a function."""


class RewardFileImportError(RewardFunctionError, ImportError):
    """The reward file raised while being imported."""


def load_custom_reward_fn(
    path: str | None,
    name: str = "compute_score",
    reward_kwargs: Mapping[str, Any] | None = None,
) -> Callable[..., Any] | None:
    """Imports ``name`` from the Python file at ``path``.

    The function is called by reward managers as
    ``fn(data_source=..., solution_str=..., ground_truth=..., extra_info=...)``.

    Args:
        path: Path of a ``.py`` file, or None/empty for "no custom reward".
        name: Name of the function inside the file.
        reward_kwargs: Fixed keyword arguments bound to the function with
            :func:`functools.partial` (verl's ``custom_reward_function.reward_kwargs``).

    Returns:
        The callable (possibly partially applied), or None when ``path`` is None or empty.

    Raises:
        RewardFileNotFound: (a ``FileNotFoundError``) if ``path`` does not exist.
        RewardFunctionNotFound: (an ``AttributeError``) if the file defines no attribute
            ``name`` (lists the callables it has).
        RewardFunctionNotCallable: (a ``TypeError``) if ``name`` exists but is not callable.
        RewardFileImportError: (an ``ImportError``) if the file cannot be loaded as a module
            (the original error is chained).
        All four are `verl.utils.errors.RewardFunctionError` (one line on the command line).
    """
    if not path:
        return None
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise RewardFileNotFound(f"custom_reward_function.path: file not found: {path!r} (resolved to {file})")
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    module_name = f"verl_custom_reward_{file.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise RewardFileImportError(f"custom_reward_function.path: cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered so that pickling (e.g. to Ray workers) and dataclasses inside the file work.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise RewardFileImportError(f"error while importing custom reward file {file}: {exc!r}") from exc
    if not hasattr(module, name):
        available = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        raise RewardFunctionNotFound(
            f"custom_reward_function.name: reward function {name!r} not found in {file}; "
            f"callables defined there: {available}"
        )
    fn = getattr(module, name)
    if not callable(fn):
        raise RewardFunctionNotCallable(
            f"custom_reward_function.name: {name!r} in {file} is not callable (got {type(fn).__name__})"
        )
    return functools.partial(fn, **reward_kwargs) if reward_kwargs else fn
