"""verl's ``verl.workers.reward_manager.registry``: ``REWARD_MANAGER_REGISTRY``, ``register``,
``get_reward_manager_cls``.

``REWARD_MANAGER_REGISTRY`` is a dict view of the product's `verl.reward.managers.REWARD_MANAGERS`:
reading a name gives the class verl code registered (or the product's manager), writing or
deleting changes the registry the trainer selects ``reward_manager.name`` from.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, Callable

from verl.reward.managers import REWARD_MANAGERS
from verl.reward.verl_managers import get_reward_manager_cls as _get_cls
from verl.reward.verl_managers import register as _register

__all__ = ["REWARD_MANAGER_REGISTRY", "get_reward_manager_cls", "register"]


class _RegistryView(MutableMapping):
    """``name -> class`` over `REWARD_MANAGERS` (a verl-registered class is stored wrapped; read back unwrapped)."""

    def __getitem__(self, name: str) -> Any:
        if name not in REWARD_MANAGERS:
            raise KeyError(name)
        return _get_cls(name)

    def __setitem__(self, name: str, value: Any) -> None:
        REWARD_MANAGERS.remove(name)
        REWARD_MANAGERS.add(name, value)

    def __delitem__(self, name: str) -> None:
        if name not in REWARD_MANAGERS:
            raise KeyError(name)
        REWARD_MANAGERS.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(REWARD_MANAGERS.names())

    def __len__(self) -> int:
        return len(REWARD_MANAGERS)


REWARD_MANAGER_REGISTRY: MutableMapping = _RegistryView()


def register(name: str) -> Callable[[type], type]:
    """verl's ``@register("name")`` (`verl.reward.verl_managers.register`).

    Raises:
        ValueError: ``name`` is taken by another class.
    """
    return _register(name)


def get_reward_manager_cls(name: str) -> Any:
    """The class registered under ``name``.

    Raises:
        ValueError: ``Unknown reward manager: <name>`` (with the registered names).
    """
    if name not in REWARD_MANAGERS:
        raise ValueError(f"Unknown reward manager: {name}. Registered: {REWARD_MANAGERS.names()}")
    return _get_cls(name)
