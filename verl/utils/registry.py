"""A tiny name → object registry for the real extension axes of verl.

Used for advantage estimators, policy losses, reward scorers and rollout engines:
every entry of one registry has the same signature, registering a name twice is an error, and
looking up an unknown name raises an error that lists the valid names and the closest match.

Example:
    >>> SCORERS: Registry[Callable[[str, str], float]] = Registry("reward scorer")
    >>> @SCORERS.register("exact")
    ... def exact(pred: str, truth: str) -> float:
    ...     return float(pred == truth)
    >>> SCORERS.get("exact")("a", "a")
    1.0
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry", "RegistryError"]


class RegistryError(ValueError, KeyError):
    """Unknown or duplicate registry name.

    Subclasses both `ValueError` and `KeyError` so that callers may catch either.
    """

    def __str__(self) -> str:
        # KeyError.__str__ would wrap the message in quotes.
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """Maps names to objects (usually functions or classes) of one kind.

    Args:
        kind: human-readable name of what is registered, used in error messages
            (e.g. ``"advantage estimator"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers the decorated object under ``name`` and returns it unchanged.

        Raises:
            RegistryError: if ``name`` is already registered.
        """

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name`` (non-decorator form).

        Raises:
            RegistryError: if ``name`` is already registered or is not a non-empty string.
        """
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._entries:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered (by {self._entries[name]!r}); pick another name"
            )
        self._entries[name] = obj

    def get(self, name: str) -> T:
        """Return the object registered under ``name``.

        Raises:
            RegistryError: listing the valid names and the closest match when ``name`` is unknown.
        """
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise RegistryError(self._miss_message(name)) from None

    def _miss_message(self, name: object) -> str:
        valid = sorted(self._entries)
        msg = f"unknown {self.kind} {name!r}; valid names: {', '.join(valid) or '(none registered)'}"
        close = difflib.get_close_matches(str(name), valid, n=1, cutoff=0.5)
        if close:
            msg += f". Did you mean {close[0]!r}?"
        return msg

    def remove(self, name: str) -> None:
        """Unregister ``name`` (no-op when absent); for views that replace entries (verl's dict registries)."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={self.names()})"
