"""verl's ``reward.*`` namespace and its legacy spellings, as verl's ``migrate_legacy_reward_impl``.

verl moved the reward settings under one section (``verl/trainer/config/reward/reward.yaml``):
``reward.num_workers``, ``reward.streaming`` (the product's own key, streaming rewards),
``reward.custom_reward_function.{path,name}``,
``reward.reward_manager.{source,name,module.{path,name}}``,
``reward.reward_model.{enable,enable_resource_pool,n_gpus_per_node,nnodes,model_path,rollout}``,
``reward.sandbox_fusion.*`` and ``reward.reward_kwargs``. Its composed config still carries the
legacy spellings (``reward_model.*``, ``custom_reward_function.*``, top-level
``sandbox_fusion.*``, from ``legacy_reward_impl.yaml``) with ``null`` meaning "not set", and
verl's ``migrate_legacy_reward_impl`` copies every non-null legacy value over the new key.

Here both spellings work and mean the same setting:

- a legacy value that is set (not ``null`` and not the product's default) wins, as in verl; the
  new key then holds it too;
- a new key off verl's default is copied to the key the product reads (the legacy spelling,
  e.g. ``reward_model.reward_manager`` for ``reward.reward_manager.name``);
- a legacy value and a new value that are both set and differ (the new one off verl's default)
  is an error naming both keys;
- ``reward.reward_model.rollout`` is the engine verl's reward loop serves the reward model with;
  here the reward model (``model_path``, a sequence-classification model) is scored by the
  product's reward-model worker, so those serving settings have no effect (the same scores).

The product's earlier top-level ``reward_manager.{source,name,module}`` keys are a third spelling
of ``reward.reward_manager.*`` and follow the same rules.
"""

from __future__ import annotations

import copy
from typing import Any

from verl.config.errors import ConfigError

__all__ = ["REWARD_KEYS", "migrate_reward"]

_MISSING = object()

REWARD_KEYS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # (new key, legacy spellings in the order verl reads them, the key the product reads)
    ("reward.num_workers", ("reward_model.num_workers",), "reward_model.num_workers"),
    ("reward.streaming", ("reward_model.streaming",), "reward_model.streaming"),
    (
        "reward.reward_manager.name",
        ("reward_model.reward_manager", "reward_manager.name"),
        "reward_model.reward_manager",
    ),
    (
        "reward.reward_manager.source",
        ("reward_model.reward_loop_source", "reward_manager.source"),
        "reward_manager.source",
    ),
    (
        "reward.reward_manager.module.path",
        ("reward_model.reward_loop_module_path", "reward_manager.module.path"),
        "reward_manager.module.path",
    ),
    (
        "reward.reward_manager.module.name",
        ("reward_model.reward_loop_class_name", "reward_manager.module.name"),
        "reward_manager.module.name",
    ),
    ("reward.custom_reward_function.path", ("custom_reward_function.path",), "custom_reward_function.path"),
    ("reward.custom_reward_function.name", ("custom_reward_function.name",), "custom_reward_function.name"),
    (
        "reward.custom_reward_function.reward_kwargs",
        ("custom_reward_function.reward_kwargs",),
        "custom_reward_function.reward_kwargs",
    ),
    ("reward.reward_kwargs", ("reward_model.reward_kwargs",), "reward_model.reward_kwargs"),
    ("reward.reward_model.enable", ("reward_model.enable",), "reward_model.enable"),
    (
        "reward.reward_model.enable_resource_pool",
        ("reward_model.enable_resource_pool",),
        "reward_model.enable_resource_pool",
    ),
    ("reward.reward_model.n_gpus_per_node", ("reward_model.n_gpus_per_node",), "reward_model.n_gpus_per_node"),
    ("reward.reward_model.nnodes", ("reward_model.nnodes",), "reward_model.nnodes"),
    ("reward.reward_model.model_path", ("reward_model.model.path",), "reward_model.model.path"),
    (
        "reward.sandbox_fusion.url",
        ("reward_model.sandbox_fusion.url", "sandbox_fusion.url"),
        "reward_model.sandbox_fusion.url",
    ),
    (
        "reward.sandbox_fusion.max_concurrent",
        ("reward_model.sandbox_fusion.max_concurrent", "sandbox_fusion.max_concurrent"),
        "reward_model.sandbox_fusion.max_concurrent",
    ),
    (
        "reward.sandbox_fusion.memory_limit_mb",
        ("reward_model.sandbox_fusion.memory_limit_mb", "sandbox_fusion.memory_limit_mb"),
        "reward_model.sandbox_fusion.memory_limit_mb",
    ),
)
"""Every key of verl's ``reward`` section with its legacy spellings and the product's key."""


def _get(tree: dict[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    from verl.config._tree import set_path

    set_path(tree, path, copy.deepcopy(value))


def _pop(tree: dict[str, Any], path: str) -> None:
    parts = path.split(".")
    node: Any = tree
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def _defaults() -> dict[str, Any]:
    from omegaconf import OmegaConf

    from verl.config.schema import RootConfig

    from verl.config._tree import merge_trees
    from verl.config.compat.verl_inert import verl_defaults

    # verl's keys without effect here (reward_model.sandbox_fusion.*, ...) are not schema fields
    return merge_trees(
        verl_defaults(RootConfig), OmegaConf.to_container(OmegaConf.structured(RootConfig), resolve=False)
    )


def _migrate_one(
    tree: dict[str, Any], new: str, legacy: tuple[str, ...], target: str, defaults: dict[str, Any]
) -> None:
    default = _get(defaults, new)
    value = _get(tree, new)
    set_legacy = [
        (p, v) for p in legacy if (v := _get(tree, p)) is not _MISSING and v is not None and v != _get(defaults, p)
    ]
    for path in legacy:  # verl's null = not set
        if _get(tree, path) is None:
            _pop(tree, path)
    if set_legacy:
        path, old = set_legacy[0]
        for other, v in set_legacy[1:]:
            if v != old and other != target:
                raise ConfigError(f"{path}={old!r} and {other}={v!r} disagree (two spellings of {new}); set only {new}")
        if value is not _MISSING and value is not None and value != default and value != old:
            raise ConfigError(
                f"{new}={value!r} and {path}={old!r} are both set and disagree (the legacy spelling "
                f"of the same setting); set only {new}"
            )
        _set(tree, new, old)
        _set(tree, target, old)
    elif value is not _MISSING and value is not None and value != default:
        _set(tree, target, value)


def _check_generative(tree: dict[str, Any]) -> None:
    rollout = _get(tree, "reward.reward_model.rollout")
    if isinstance(rollout, dict) and rollout.get("name") == "???":  # verl's "mandatory when used"
        rollout["name"] = None


def migrate_reward(tree: dict[str, Any]) -> dict[str, Any]:
    """Applies the rules above to a tree of user values (in place; also returned).

    Raises:
        ConfigError: A legacy and a new spelling of one setting both set and different.
    """
    touched = "reward" in tree or any(
        k in tree for k in ("reward_model", "custom_reward_function", "sandbox_fusion", "reward_manager")
    )
    if not touched:
        return tree
    defaults = _defaults()
    for new, legacy, target in REWARD_KEYS:
        _migrate_one(tree, new, legacy, target, defaults)
    _check_generative(tree)
    for section in ("sandbox_fusion", "custom_reward_function", "reward_model"):
        if tree.get(section) == {} or (section == "sandbox_fusion" and section in tree):
            tree.pop(section, None)  # the top-level legacy sandbox_fusion lives in reward_model.sandbox_fusion here
    return tree
