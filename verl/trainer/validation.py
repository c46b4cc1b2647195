"""Validation metrics as verl names and computes them (``verl/trainer/ppo/metric_utils.py``).

Every validation sample has a data source, a prompt ``uid`` and a set of variables: ``reward``
(the sequence score) plus whatever the scorer reported per sample (``acc``, ``pred``, ...).
For each (data source, prompt, numeric variable) with N responses:

- ``mean@N`` = mean over the N responses; with N > 1 also ``std@N`` (population std);
- for n in 2, 4, 8, ... < N and n = N, over ``n_bootstrap`` = 1000 subsets of n responses drawn
  with replacement (NumPy ``RandomState(seed).choice``, seed 42, as verl): ``best@n/{mean,std}``
  (max of the subset), ``worst@n/{mean,std}`` (min), and, when the scorer reports ``pred``,
  ``maj@n/{mean,std}``: the value of the first response carrying the most frequent ``pred`` in
  the subset (ties: the ``pred`` seen first in the subset);
- with N = 1 only ``mean@1``.

Each metric is averaged over the prompts of a data source. Names:
``val-core/<source>/<var>/<metric>`` for the core variable (``acc`` when the scorer reports it,
else ``reward``) and metrics starting with ``mean``/``maj``/``best`` at the largest n;
everything else ``val-aux/<source>/<var>/<metric>``. ``val/accuracy`` (kept for the quick start
and the progress bar) is the mean over all prompts of the core variable's ``mean@N``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bootstrap_stats", "majority_value", "process_validation_metrics", "validation_metrics"]

N_BOOTSTRAP = 1000


def subset_sizes(n_resps: int) -> list[int]:
    """Bootstrap subset sizes: 2, 4, 8, ... below ``n_resps``, then ``n_resps`` (none for N <= 1)."""
    if n_resps <= 1:
        return []
    sizes, n = [], 2
    while n < n_resps:
        sizes.append(n)
        n *= 2
    return sizes + [n_resps]


def _draws(n_data: int, subset_size: int, n_bootstrap: int, seed: int) -> np.ndarray:
    """`(n_bootstrap, subset_size)` indices; the stream of ``np.random.seed(seed); np.random.choice``."""
    return np.random.RandomState(seed).choice(n_data, size=(n_bootstrap, subset_size), replace=True)


def bootstrap_stats(values: Sequence[float], subset_size: int, n_bootstrap: int = N_BOOTSTRAP, seed: int = 42) -> dict[str, tuple[float, float]]:
    """(mean, std) over bootstrap subsets of the subset max (``best``) and min (``worst``).

    Args:
        values: One prompt's N values.
        subset_size: n, responses per subset.
        n_bootstrap: Number of subsets.
        seed: Seed of the subset draws.

    Returns:
        ``{"best": (mean, std), "worst": (mean, std)}`` (population std over subsets).
    """
    samples = np.asarray(values, dtype=np.float64)[_draws(len(values), subset_size, n_bootstrap, seed)]
    best, worst = samples.max(axis=1), samples.min(axis=1)
    return {"best": (float(best.mean()), float(best.std())), "worst": (float(worst.mean()), float(worst.std()))}


def majority_value(values: Sequence[float], preds: Sequence[Any]) -> float:
    """Value of the first response with the most frequent ``pred`` (ties: the pred seen first)."""
    counts: dict[Any, int] = {}
    first: dict[Any, float] = {}
    for value, pred in zip(values, preds, strict=True):
        counts[pred] = counts.get(pred, 0) + 1
        first.setdefault(pred, float(value))
    top = max(counts, key=counts.__getitem__)  # dicts keep first-seen order, so ties go to it
    return first[top]


def _majority_stats(values: Sequence[float], preds: Sequence[Any], subset_size: int, n_bootstrap: int, seed: int) -> tuple[float, float]:
    idx = _draws(len(values), subset_size, n_bootstrap, seed)
    vals = np.asarray(values, dtype=np.float64)
    preds_arr = np.asarray([_hashable(p) for p in preds], dtype=object)
    maj = np.array([majority_value(vals[row], preds_arr[row]) for row in idx])
    return float(maj.mean()), float(maj.std())


def _hashable(x: Any) -> Any:
    return x if isinstance(x, (str, int, float, bool, type(None))) else repr(x)


def _is_numeric(values: list[Any]) -> bool:
    return bool(values) and not isinstance(values[0], str) and all(
        isinstance(v, (int, float, np.integer, np.floating, bool, np.bool_)) for v in values)


def _prompt_metrics(var_vals: list[float], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n = len(var_vals)
    out = {f"mean@{n}": float(np.mean(var_vals))}
    if n <= 1:
        return out
    out[f"std@{n}"] = float(np.std(var_vals))
    for size in subset_sizes(n):
        stats = bootstrap_stats(var_vals, size, N_BOOTSTRAP, seed)
        for kind in ("best", "worst"):
            out[f"{kind}@{size}/mean"], out[f"{kind}@{size}/std"] = stats[kind]
        if preds is not None:
            out[f"maj@{size}/mean"], out[f"maj@{size}/std"] = _majority_stats(var_vals, preds, size, N_BOOTSTRAP, seed)
    return out


def process_validation_metrics(
    data_sources: Sequence[str], sample_uids: Sequence[str], infos_dict: dict[str, Sequence[Any]], seed: int = 42
) -> dict[str, dict[str, dict[str, float]]]:
    """``{data_source: {variable: {metric: value}}}``, averaged over prompts (module docstring).

    Args:
        data_sources: `(B,)` data source of each response.
        sample_uids: `(B,)` prompt id of each response (the N responses of a prompt share it).
        infos_dict: ``{variable: (B,) values}``: ``reward`` plus the scorer's per-sample
            values; string and non-numeric variables are only used as ``pred`` (votes).
        seed: Seed of the bootstrap subset draws.
    """
    grouped: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids, strict=True)):
        for var, vals in infos_dict.items():
            grouped[source][uid][var].append(vals[i])
    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for source, uid2vars in grouped.items():
        for var2vals in uid2vars.values():
            preds = var2vals.get("pred")
            for var, vals in var2vals.items():
                if var == "pred" or not _is_numeric(vals):
                    continue
                for name, value in _prompt_metrics([float(v) for v in vals], preds, seed).items():
                    per_prompt[source][var][name].append(value)
    return {s: {v: {m: float(np.mean(x)) for m, x in ms.items()} for v, ms in vs.items()} for s, vs in per_prompt.items()}


def _largest_n(metric_names: Sequence[str]) -> int:
    return max(int(name.split("@")[-1].split("/")[0]) for name in metric_names)


def validation_metrics(
    data_sources: Sequence[str], sample_uids: Sequence[str], infos_dict: dict[str, Sequence[Any]], seed: int = 42
) -> dict[str, float]:
    """Flat ``val-core/...`` / ``val-aux/...`` metrics plus ``val/accuracy`` (module docstring)."""
    nested = process_validation_metrics(data_sources, sample_uids, infos_dict, seed)
    out: dict[str, float] = {}
    for source, var2metrics in nested.items():
        core_var = "acc" if "acc" in var2metrics else "reward"
        for var, metrics in var2metrics.items():
            n_max = _largest_n(list(metrics))
            for name, value in metrics.items():
                core = var == core_var and name.startswith(("mean", "maj", "best")) and f"@{n_max}" in name
                out[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = value
    core_means = _per_prompt_core_means(data_sources, sample_uids, infos_dict)
    out["val/accuracy"] = float(np.mean(core_means)) if core_means else 0.0
    return out


def _per_prompt_core_means(data_sources: Sequence[str], uids: Sequence[str], infos: dict[str, Sequence[Any]]) -> list[float]:
    """Each prompt's mean of its data source's core variable (``acc`` when reported, else ``reward``)."""
    has_acc = {s for s, a in zip(data_sources, infos.get("acc") or [None] * len(data_sources)) if a is not None}
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for i, (source, uid) in enumerate(zip(data_sources, uids)):
        var = "acc" if source in has_acc and "acc" in infos else "reward"
        per[(source, uid)].append(float(infos[var][i]))
    return [float(np.mean(v)) for v in per.values()]
