"""verl's current config layout, normalised onto the schema before keys and types are checked.

:func:`normalize_verl_tree` runs on the user's values (composed YAML + overrides) and rewrites
what verl writes that the schema spells differently:

- ``_target_`` markers anywhere: checked against the section they mark
  (:mod:`verl.config.compat.verl_targets`) and removed (the schema's dataclasses type every section).
  Inside a free-form mapping (``override_config``, ``engine_kwargs``, ...) an unknown
  ``_target_`` is user data and is kept.
- Roles on verl's Megatron / TorchTitan / VeOmni engines: mapped onto FSDP2 when data parallel
  (:mod:`verl.config.engine_layout`); the AutoModel engine is refused.
- ``model_engine`` (verl's engine-family group, ``dp`` for FSDP): its choice is already in the
  composed sections (the roles' ``strategy`` keys), so it is checked and removed.
- The ``reward.*`` namespace and its legacy spellings (:mod:`verl.config.compat.reward_layout`).
- ``critic.fsdp`` (verl's engine section of the critic) and ``critic.model.fsdp_config`` (the
  older spelling the workers read): both end up holding the merged values; the same leaf set to
  different values in both is an error naming them.
- ``null`` where verl's defaults hold ``null`` (verl's "not set") for a field the schema types
  as non-null (:data:`VERL_NULL_DEFAULTS`): the key is dropped, i.e. the schema default, which is
  verl's behaviour when unset.

Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any

from verl.config.engine_layout import engine_override, map_other_engines
from verl.config.errors import ConfigError
from verl.config.compat.reward_layout import migrate_reward
from verl.config.compat.verl_targets import check_target

__all__ = ["MODEL_ENGINES", "OVERRIDE_ALIASES", "normalize_verl_tree", "translate_layout_override"]

OVERRIDE_ALIASES: dict[str, str] = {
    "actor_rollout_ref.actor.policy_loss.tau_pos": "actor_rollout_ref.actor.tau_pos",
    "actor_rollout_ref.actor.policy_loss.tau_neg": "actor_rollout_ref.actor.tau_neg",
}
"""Spellings verl's scripts use for a key that lives elsewhere (verl's SAPO script adds
``+actor_rollout_ref.actor.policy_loss.tau_pos``; SAPO reads ``actor.tau_pos``) -> that key."""


def translate_layout_override(key: str, value: Any) -> dict[str, Any] | None:
    """An override written with an :data:`OVERRIDE_ALIASES` spelling, as the canonical values; an
    override of a Megatron / TorchTitan / VeOmni engine key, as tree values (mapped onto FSDP2 later)."""
    from verl.config._tree import nested

    target = OVERRIDE_ALIASES.get(key)
    return nested(target, value) if target is not None else engine_override(key, value)


def _move_aliases(tree: dict[str, Any]) -> None:
    from verl.config._tree import get_path, set_path

    for alias, target in OVERRIDE_ALIASES.items():
        parent, leaf = get_path(tree, alias)
        if parent is None or leaf not in parent:
            continue
        value = parent.pop(leaf)
        t_parent, t_leaf = get_path(tree, target)
        if t_parent is not None and t_leaf in t_parent and t_parent[t_leaf] != value:
            raise ConfigError(f"{alias}={value!r} and {target}={t_parent[t_leaf]!r} disagree; set only {target}")
        set_path(tree, target, value)


MODEL_ENGINES = frozenset({"dp", "megatron", "torchtitan", "veomni", "automodel"})
"""verl's ``model_engine`` group options (``verl/trainer/config/model_engine/*.yaml``)."""


def _strip_targets(node: dict[str, Any], path: str, kind: Any) -> None:
    if "_target_" in node:
        section_kind = kind(path) if path else "schema"
        if section_kind != "free" or _target_known(path):
            check_target(path, node.pop("_target_"))
    for key, value in node.items():
        if isinstance(value, dict):
            _strip_targets(value, f"{path}.{key}" if path else str(key), kind)


def _target_known(path: str) -> bool:
    from verl.config.compat.verl_targets import _classes_for

    return bool(_classes_for(path))


OTHER_ENGINES: dict[str, str] = {"automodel": "AutoModel"}
"""verl's training engines other than FSDP that are refused (Megatron / TorchTitan / VeOmni roles run on
FSDP2 when data parallel: :mod:`verl.config.engine_layout`)."""


def _refuse_other_engines(tree: dict[str, Any]) -> None:
    """A role on verl's AutoModel engine is refused by name, before its engine-specific keys are
    reported one by one."""
    from verl.config.errors import not_supported

    roles = (
        ("actor_rollout_ref.actor", (tree.get("actor_rollout_ref") or {}).get("actor")),
        ("actor_rollout_ref.ref", (tree.get("actor_rollout_ref") or {}).get("ref")),
        ("critic", tree.get("critic")),
    )
    for path, role in roles:
        strategy = role.get("strategy") if isinstance(role, dict) else None
        if isinstance(strategy, str) and strategy in OTHER_ENGINES:
            raise not_supported(
                f"{path}.strategy",
                f"{strategy!r} is verl's {OTHER_ENGINES[strategy]} engine; this "
                "product trains with FSDP2 only: use strategy=fsdp (verl's model_engine=dp, ppo_trainer.yaml)",
            )


def _drop_model_engine(tree: dict[str, Any]) -> None:
    if "model_engine" not in tree:
        return
    engine = tree.pop("model_engine")
    if engine not in MODEL_ENGINES:
        raise ConfigError(f"model_engine: expected one of {', '.join(sorted(MODEL_ENGINES))}, got {engine!r}")


def _merge_alias(tree: dict[str, Any], new: str, old: str) -> None:
    """Both sections hold the union of their values; one leaf set differently in both is an error."""
    from verl.config._tree import get_path, merge_trees, set_path

    new_parent, new_leaf = get_path(tree, new)
    old_parent, old_leaf = get_path(tree, old)
    a = new_parent.get(new_leaf) if new_parent is not None else None
    b = old_parent.get(old_leaf) if old_parent is not None else None
    if not isinstance(a, dict) or not isinstance(b, dict):
        if isinstance(a, dict) or isinstance(b, dict):
            both = a if isinstance(a, dict) else b
            set_path(tree, new, both)
            set_path(tree, old, merge_trees({}, both))
        return
    _check_agree(a, b, new, old)
    merged = merge_trees(b, a)
    set_path(tree, new, merged)
    set_path(tree, old, merge_trees({}, merged))


def _check_agree(a: dict[str, Any], b: dict[str, Any], pa: str, pb: str) -> None:
    for key in set(a) & set(b):
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            _check_agree(a[key], b[key], f"{pa}.{key}", f"{pb}.{key}")
        elif a[key] != b[key]:
            raise ConfigError(
                f"{pa}.{key}={a[key]!r} and {pb}.{key}={b[key]!r} disagree (two spellings of one "
                f"setting); set only {pa}.{key}"
            )


VERL_NULL_DEFAULTS: tuple[str, ...] = (
    "*.optim.warmup_style",
    "data.seed",
    "reward_model.model.trust_remote_code",
    "reward_model.enable",
    "reward_model.enable_resource_pool",
    "reward_model.n_gpus_per_node",
    "reward_model.nnodes",
    "reward_model.reward_loop_source",
    "reward_model.reward_manager",
    "custom_reward_function.name",
    "reward.custom_reward_function.name",
)
"""Keys verl's defaults hold as ``null`` ("not set") that the schema types as non-null: there a
``null`` is the schema default, verl's behaviour when the key is unset (``warmup_style`` null =
use ``lr_scheduler_type``; ``data.seed`` null = the trainer's seed)."""


def _drop_nulls(tree: dict[str, Any]) -> None:
    from verl.config._tree import get_path

    for pattern in VERL_NULL_DEFAULTS:
        prefix, _, leaf = pattern.rpartition(".")
        parents = (
            [get_path(tree, f"{prefix}.{leaf}")[0]]
            if "*" not in prefix
            else [
                (tree.get(top) or {}).get(role, {}).get("optim")
                if top == "actor_rollout_ref"
                else (tree.get(top) or {}).get("optim")
                for top, role in (("actor_rollout_ref", "actor"), ("actor_rollout_ref", "ref"), ("critic", None))
            ]
        )
        for parent in parents:
            if isinstance(parent, dict) and leaf in parent and parent[leaf] is None:
                del parent[leaf]


def normalize_verl_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """Rewrites verl's current layout in a tree of user values (in place; also returned).

    Args:
        tree: Plain nested dict (composed YAML files and overrides).

    Returns:
        ``tree``.

    Raises:
        ConfigError: A wrong ``_target_``, an unknown ``model_engine``, two spellings of one
            setting that disagree (``reward.*`` vs ``reward_model.*``, ``critic.fsdp`` vs
            ``critic.model.fsdp_config``).
    """
    from verl.config.introspect import key_kind

    _strip_targets(tree, "", key_kind)
    _move_aliases(tree)
    _refuse_other_engines(tree)
    map_other_engines(tree)
    _drop_model_engine(tree)
    migrate_reward(tree)
    if isinstance(tree.get("critic"), dict):
        _merge_alias(tree, "critic.fsdp", "critic.model.fsdp_config")
    _drop_nulls(tree)
    return tree
