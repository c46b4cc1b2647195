"""verl's ``sft_trainer_engine.yaml`` layout (``torchrun -m verl.trainer.sft_trainer``) -> the SFT config tree.

verl's current SFT trainer composes ``sft_trainer_engine.yaml`` from the Hydra groups
``model@model: hf_model``, ``engine@engine: fsdp``, ``optim@optim: fsdp`` and
``profiler@profiler: profiler``: ``model.path``, ``data.messages_key`` / ``tools_key`` /
``enable_thinking_key`` (rows are always chat conversations), ``data.pad_mode``,
``data.use_dynamic_bsz`` / ``max_token_len_per_gpu``, ``engine.*``, ``optim.lr_scheduler_type``,
``checkpoint.save_contents`` ... The older ``fsdp_sft_trainer`` layout (``model.partial_pretrain``,
``data.prompt_key``, ``data.multiturn.*``, ``model.fsdp_config.*``) is the product's own schema
(`verl.config.sft_schema`); `engine_layout_tree` rewrites a tree of the new layout, over verl's
defaults of that layout, into it. A config is in the new layout when it uses a key only that layout
has (`uses_engine_layout`); mixing the two is refused, naming a key of each.

Every key of the layout is in one state: *mapped* (`MAPPED`: the SFT key it sets), a documented
no-op (`NOOP`: same values, or read only by a feature that is off), or accepted at verl's default
only (`UNSUPPORTED`: any other value is the one-line "not supported yet"). A key of none of them is
"unknown" with a did-you-mean.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Sequence
from typing import Any

from verl.config.errors import ConfigError, not_supported
from verl.config.sft_engine_tables import DEFAULTS, FREE, GROUPS, MAPPED, NEW_ONLY, NOOP, OLD_ONLY, TARGETS, UNSUPPORTED

__all__ = ["engine_layout_tree", "uses_engine_layout"]


def _leaves(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if not isinstance(tree, dict) or (prefix in FREE and prefix):
        return [(prefix, tree)]
    out: list[tuple[str, Any]] = []
    for k, v in tree.items():
        out.extend(_leaves(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _override_keys(overrides: Sequence[str]) -> list[tuple[str, Any]]:
    from verl.config.overrides import parse_overrides

    return [(o.key_or_group, None if o.is_delete() else o.value()) for o in parse_overrides(overrides)]


def _is_new(path: str) -> bool:
    return any(path == m or path.startswith(m + ".") for m in NEW_ONLY)


def _is_old(path: str) -> bool:
    return any(path == m or path.startswith(m + ".") for m in OLD_ONLY)


def uses_engine_layout(tree: dict[str, Any], overrides: Sequence[str]) -> bool:
    """True when the file tree or an override uses a key only verl's ``sft_trainer_engine`` layout has.

    Raises:
        ConfigError: keys of both layouts are used (naming one of each).
    """
    paths = [p for p, _ in _leaves(tree)] + [k for k, _ in _override_keys(overrides)]
    new = next((p for p in paths if _is_new(p)), None)
    old = next((p for p in paths if _is_old(p)), None)
    if new and old:
        raise ConfigError(
            f"'{new}' is a key of verl's sft_trainer_engine layout and '{old}' one of the older "
            "fsdp_sft_trainer layout; use one layout (e.g. model.path instead of model.partial_pretrain)"
        )
    return new is not None


def _apply(tree: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Group choices (``engine=fsdp``) checked and dropped; the other overrides applied to ``tree``
    by the shared applier, without its key checks (this layout's keys are checked by `_status`)."""
    from verl.config.overrides import apply_overrides

    rest = []
    for o, (key, value) in zip(overrides, _override_keys(overrides)):
        if key in GROUPS and not isinstance(value, dict):
            if value not in GROUPS[key]:
                raise not_supported(
                    f"{key}={value}",
                    f"the SFT trainer runs the {GROUPS[key][0]} option of the "
                    f"'{key}' group here; use {key}={GROUPS[key][0]}",
                )
            continue
        rest.append(o)
    return apply_overrides(tree, rest, root=None)


def _resolve(tree: dict[str, Any]) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_container(OmegaConf.create(tree), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise ConfigError(
            f"{getattr(e, 'full_key', '') or 'config'}: {str(getattr(e, 'msg', e)).splitlines()[0]}"
        ) from None


def _status(path: str) -> tuple[str, Any]:
    if path in MAPPED:
        return "mapped", MAPPED[path]
    if path in UNSUPPORTED:
        return "unsupported", UNSUPPORTED[path]
    for pattern, reason in NOOP.items():
        if fnmatch.fnmatchcase(path, pattern):
            return "noop", reason
    return "unknown", None


def _unknown(path: str) -> ConfigError:
    parent, _, leaf = path.rpartition(".")
    siblings = [p.rpartition(".")[2] for p, _ in _leaves(DEFAULTS) if p.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    # the full dotted key, as the shared walker (`verl.config.introspect.unknown_key_message`) names it
    hint = f" (did you mean '{parent + '.' if parent else ''}{close[0]}'?)" if close else ""
    if not hint and _is_old(path):
        hint = " (a key of the older fsdp_sft_trainer layout; this config uses verl's sft_trainer_engine keys)"
    return ConfigError(f"unknown key '{path}'" + hint)


def _check_target(section: str, value: Any) -> None:
    if value != TARGETS.get(section):
        raise ConfigError(
            f"{section}._target_: {value!r} does not match the '{section}' section (verl's is {TARGETS.get(section)!r})"
        )


def engine_layout_tree(tree: dict[str, Any], overrides: Sequence[str], device_default: str) -> dict[str, Any]:
    """The SFT schema's tree (`verl.config.sft_schema.SFTRootConfig`) of a config in verl's engine layout.

    Args:
        tree: the config file's tree (may be empty).
        overrides: Hydra-grammar overrides, group choices included (``engine=fsdp model=hf_model``).
        device_default: ``trainer.device`` when neither sets it (verl's default is cuda).

    Raises:
        ConfigError: an unknown key (did-you-mean), a ``_target_`` of another section, a group option
            other than verl's fsdp / hf_model, or a key set away from verl's default that is not
            supported yet (one line naming the key).
    """
    from verl.config._tree import merge_trees, set_path

    base = merge_trees(DEFAULTS, {"trainer": {"device": device_default}})
    merged = _resolve(_apply(merge_trees(base, tree), overrides))
    out: dict[str, Any] = {"data": {"multiturn": {"enable": True}}}
    for path, value in _leaves(merged):
        section, _, rest = path.partition(".")
        if rest == "_target_":
            _check_target(section, value)
            continue
        kind, info = _status(path)
        if kind == "unknown":
            raise _unknown(path)
        if kind == "unsupported":
            default, what = info
            if value != default and not (value in (None, [], {}) and default in (None, [], {})):
                raise not_supported(path, what)
        elif kind == "mapped":
            target, convert = info if isinstance(info, tuple) else (info, None)
            try:
                converted = convert(value, merged) if convert else value
            except ValueError as e:
                raise ConfigError(str(e)) from None
            if not target.startswith("_checked."):  # a key only validated here (it has no SFT schema field)
                set_path(out, target, converted)
    return out
