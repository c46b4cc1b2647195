"""Pre-flight check of multi-turn rollouts: the tool and interaction configs, and the rows that use them.

Run by `verl.run.preflight.run_preflight` (check ``multi-turn configs``) before any
model loads; the agent loop builds the same tools and interactions again later, so a config
that passes here is one the rollout can load. Checked:

* ``actor_rollout_ref.rollout.multi_turn.tool_config_path``: the file exists and every entry
  builds (`verl.tools.registry.load_tools`: known ``class_name``, a ``tool_schema`` whose
  ``parameters`` pass the JSON Schema metaschema check, no duplicate names);
* ``...multi_turn.interaction_config_path``: the same for interactions
  (`verl.interactions.load_interactions`: every entry has a ``class_name`` that imports);
* every row of ``data.train_files`` / ``data.val_files`` whose
  ``extra_info.interaction_kwargs`` asks for an interaction gets one of the configured ones
  (the rule of `verl.interactions.select_interaction`), named by file and row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.utils.errors import DataError

__all__ = ["check_multi_turn", "interaction_requests"]

_KEY = "actor_rollout_ref.rollout.multi_turn"


def interaction_requests(path: str) -> list[tuple[str, dict[str, Any]]]:
    """(row label, ``extra_info.interaction_kwargs``) of every row of ``path`` that has them.

    Raises:
        DataError: an unreadable file (naming it).
    """
    from verl.data.rl_dataset import read_rows

    if path.endswith(".parquet") and Path(path).is_file():
        import pyarrow.parquet as pq

        if "extra_info" not in pq.read_schema(path).names:
            return []
        column = pq.read_table(path, columns=["extra_info"]).column("extra_info").to_pylist()
        rows, labels = [{"extra_info": v} for v in column], [f"row {i}" for i in range(len(column))]
    else:
        try:
            rows, labels = read_rows(path)
        except FileNotFoundError as e:
            raise DataError(str(e)) from None
    out = []
    for row, label in zip(rows, labels):
        extra = row.get("extra_info") if isinstance(row, dict) else None
        kwargs = extra.get("interaction_kwargs") if isinstance(extra, dict) else None
        if kwargs:
            out.append((label, kwargs))
    return out


def _config_file(path: str, kind: str, key: str) -> str:
    from verl.tools.registry import ToolConfigError
    from verl.workers.rollout.agent_loop.manager import builtin_config_file

    try:
        return builtin_config_file(path, kind)
    except ValueError as e:
        raise ToolConfigError(f"{key}: {e}") from None


def _prefixed(e: Exception, key: str) -> Exception:
    from verl.tools.registry import ToolConfigError

    return ToolConfigError(f"{key}: {e}")


def check_multi_turn(cfg: Any) -> str | None:
    """Tool / interaction configs load, and every row's interaction is configured (module docstring).

    Args:
        cfg: the validated root config.

    Returns:
        A one-line summary, or None when neither config is set.

    Raises:
        ToolConfigError: a missing or broken config file (naming the key, file and entry).
        DataError: a row asking for an interaction the config lacks (naming file, row and key).
    """
    from verl.interactions import load_interactions
    from verl.tools.registry import ToolConfigError, load_tools

    mt = cfg.actor_rollout_ref.rollout.multi_turn
    if not (mt.tool_config_path or mt.interaction_config_path):
        return None
    parts = []
    if mt.tool_config_path:
        key = f"{_KEY}.tool_config_path"
        try:
            tools = load_tools(_config_file(mt.tool_config_path, "tool", key))
        except ToolConfigError as e:
            raise _prefixed(e, key) from None
        parts.append(f"{len(tools)} tool(s) {sorted(tools)}")
    if mt.interaction_config_path:
        key = f"{_KEY}.interaction_config_path"
        try:
            interactions = load_interactions(_config_file(mt.interaction_config_path, "interaction", key))
        except ToolConfigError as e:
            raise _prefixed(e, key) from None
        n_rows = _check_rows(cfg, sorted(interactions))
        parts.append(f"{len(interactions)} interaction(s) {sorted(interactions)} for {n_rows} row(s)")
    return "; ".join(parts)


def _check_rows(cfg: Any, names: list[str]) -> int:
    """Rows asking for an interaction, all served by one of ``names``; returns how many."""
    n = 0
    for files_key in ("train_files", "val_files"):
        value = getattr(cfg.data, files_key) or []
        for path in [value] if isinstance(value, str) else [str(v) for v in value]:
            for label, kwargs in interaction_requests(path):
                n += 1
                name = kwargs.get("name") if isinstance(kwargs, dict) else None
                where = f"data.{files_key}: {path}: {label}: extra_info.interaction_kwargs.name"
                if name is None and len(names) > 1:
                    raise DataError(
                        f"{where} is not set and several interactions are configured ({names}, "
                        f"{_KEY}.interaction_config_path): name one"
                    )
                if name is not None and name not in names:
                    raise DataError(f"{where}={name!r} is not in {_KEY}.interaction_config_path ({names})")
    return n
