"""Registry: register / get, duplicate names, misses that list valid names and a suggestion."""

from __future__ import annotations

import pytest

from verl.utils.registry import Registry, RegistryError


def _make() -> Registry:
    reg: Registry = Registry("advantage estimator")

    @reg.register("grpo")
    def grpo() -> str:
        return "grpo"

    reg.add("rloo", lambda: "rloo")
    return reg


def test_register_and_get_returns_the_object() -> None:
    reg = _make()
    assert reg.get("grpo")() == "grpo"
    assert reg["rloo"]() == "rloo"
    assert "grpo" in reg and "ppo" not in reg
    assert reg.names() == ["grpo", "rloo"] and list(reg) == ["grpo", "rloo"] and len(reg) == 2


def test_decorator_returns_function_unchanged() -> None:
    reg: Registry = Registry("thing")

    def f() -> int:
        return 3

    assert reg.register("f")(f) is f


def test_duplicate_name_is_an_error() -> None:
    reg = _make()
    with pytest.raises(RegistryError, match="already registered"):
        reg.add("grpo", lambda: None)
    with pytest.raises(ValueError):
        reg.register("rloo")(lambda: None)
    assert reg.get("grpo")() == "grpo"  # the original entry is kept


def test_miss_lists_valid_names_and_closest_match() -> None:
    reg = _make()
    with pytest.raises(KeyError) as info:
        reg.get("gpro")
    msg = str(info.value)
    assert "grpo, rloo" in msg and "Did you mean 'grpo'?" in msg
    with pytest.raises(ValueError, match="valid names: grpo, rloo"):
        reg["zzzzzz"]


def test_empty_or_non_string_names_rejected() -> None:
    reg: Registry = Registry("thing")
    with pytest.raises(RegistryError):
        reg.add("", 1)
    with pytest.raises(RegistryError):
        reg.get(["not", "hashable"])  # type: ignore[arg-type]
