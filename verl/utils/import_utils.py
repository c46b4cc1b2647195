"""Loading a user's class or function named in the config by file path (or module) and name.

verl's configs name user code as ``{path, name}`` pairs (``data.custom_cls``,
``reward_manager.module``, ``algorithm.extension_modules`` ...). Only the file the user named is
executed; it is registered in ``sys.modules`` so that pickling to Ray workers works.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["load_extern_module", "load_extern_object", "load_extern_type"]


def load_extern_module(path: str) -> ModuleType:
    """Imports a ``.py`` file (by path) or an importable module (by dotted name), once.

    Args:
        path: ``/abs/or/relative/file.py`` or ``package.module``.

    Returns:
        The module (the same object on a second call with the same file).

    Raises:
        FileNotFoundError: A ``.py`` path that does not exist.
        ImportError: The file or module cannot be imported (the original error is chained).
    """
    if not path.endswith(".py"):
        return importlib.import_module(path)
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FileNotFoundError(f"{path!r} not found (resolved to {file})")
    module_name = f"verl_user_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:12]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ImportError(f"error while importing {file}: {exc!r}") from exc
    return module


def load_extern_type(path: str, name: str) -> Any:
    """The attribute ``name`` of the file / module ``path`` (verl's ``load_extern_type``).

    Raises:
        AttributeError: ``name`` is not defined there (the public names it has are listed).
    """
    module = load_extern_module(path)
    if not hasattr(module, name):
        public = sorted(k for k in vars(module) if not k.startswith("_"))
        raise AttributeError(f"{name!r} not found in {path}; it defines {public}")
    return getattr(module, name)


def load_extern_object(module_path: str | None, object_name: str) -> Any:
    """verl's ``load_extern_object``: the attribute ``object_name`` of a ``.py`` file or module, with verl's errors.

    Raises:
        FileNotFoundError: a ``.py`` path that does not exist.
        AttributeError: no such object (or ``module_path`` is None).
        RuntimeError: the file cannot be imported (a syntax error, ...; the cause is chained).
    """
    if module_path is None:
        raise AttributeError(f"Object not found in module: object_name={object_name!r}, module_path=None")
    try:
        return load_extern_type(module_path, object_name)
    except FileNotFoundError:
        raise
    except ImportError as e:
        raise RuntimeError(str(e)) from e
