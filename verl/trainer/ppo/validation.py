"""Validation metrics as verl names and computes them (``verl/trainer/ppo/metric_utils.py``).

Every validation sample has a data source, a prompt ``uid`` and a set of variables: ``reward``
(the sequence score) plus whatever the scorer reported per sample (``acc``, ``pred``, ...).
For each (data source, prompt, numeric variable) with N responses:

- ``mean@N`` = mean over the N responses; with N > 1 also ``std@N`` (population std);
- for n in 2, 4, 8, ... < N and n = N, statistics over the subsets of n of the N responses
  (drawn without replacement, each subset equally likely): ``best@n/{mean,std}`` (the subset's
  max), ``worst@n/{mean,std}`` (its min) and, when the scorer reports ``pred``,
  ``maj@n/{mean,std}``: the value of the first response carrying the most frequent ``pred`` in
  the subset (ties: the ``pred`` of the earliest response). ``/std`` is the population std of
  the statistic over the subsets.

  ``best`` and ``worst`` are exact, never sampled: with the values sorted ascending
  x_(1) <= ... <= x_(N), the max of a random n-subset is x_(i) with probability
  C(i−1, n−1) / C(N, n) (the min: C(N−i, n−1) / C(N, n)). For 0/1 rewards with c correct,
  ``best@n/mean`` = 1 − C(N−c, n) / C(N, n), the unbiased pass@k estimator of Chen et al. 2021
  ("Evaluating Large Language Models Trained on Code", arXiv 2107.03374, eq. 1); at n = N it is
  the max (the min) itself, std 0. ``maj@n`` is exact too when there are at most ``n_bootstrap``
  = 1000 subsets (every subset enumerated; at n = N the vote of all N responses), else the mean
  over 1000 uniformly drawn subsets without replacement (``RandomState(seed)``, seed 42), an
  unbiased estimate of the same expectation. verl bootstraps all three with replacement, which
  at n = N scores a prompt with one correct answer of four ``best@4`` ≈ 0.68 instead of 1;
- with N = 1 only ``mean@1``.

Each metric is averaged over the prompts of a data source. Names:
``val-core/<source>/<var>/<metric>`` for the core variable (``acc`` when the scorer reports it,
else ``reward``) and metrics starting with ``mean``/``maj``/``best`` at the largest n;
everything else ``val-aux/<source>/<var>/<metric>``. ``val/accuracy`` (kept for the quick start
and the progress bar) is the mean over all prompts of the core variable's ``mean@N``.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["best_worst_stats", "majority_stats", "majority_value", "process_validation_metrics", "validation_metrics"]

N_BOOTSTRAP = 1000


def subset_sizes(n_resps: int) -> list[int]:
    """Subset sizes n: 2, 4, 8, ... below ``n_resps``, then ``n_resps`` (none for N <= 1)."""
    if n_resps <= 1:
        return []
    sizes, n = [], 2
    while n < n_resps:
        sizes.append(n)
        n *= 2
    return sizes + [n_resps]


def _mean_std(values: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """Weighted mean and population std (weights sum to 1); the std from centred values, so a constant is 0."""
    mean = float(np.dot(weights, values))
    return mean, float(np.sqrt(max(float(np.dot(weights, (values - mean) ** 2)), 0.0)))


def best_worst_stats(values: Sequence[float], subset_size: int) -> dict[str, tuple[float, float]]:
    """Exact (mean, std) of the max (``best``) and min (``worst``) of a random ``subset_size``-subset.

    Subsets are drawn without replacement, each of the C(N, n) equally likely; with the values
    sorted ascending, P(max = x_(i)) = C(i−1, n−1) / C(N, n) and P(min = x_(i)) = C(N−i, n−1) /
    C(N, n) (ties included: ranks, not values, are counted). On 0/1 values ``best`` is the
    unbiased pass@k of Chen et al. 2021 (arXiv 2107.03374), 1 − C(N−c, n) / C(N, n).

    Args:
        values: One prompt's N values.
        subset_size: n, 1 <= n <= N.

    Returns:
        ``{"best": (mean, std), "worst": (mean, std)}``; at n = N exactly (max, 0.0) and (min, 0.0).

    Raises:
        ValueError: n outside [1, N].
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n_all, k = len(x), int(subset_size)
    if not 1 <= k <= n_all:
        raise ValueError(f"subset size must lie in [1, {n_all}], got {subset_size}")
    total = math.comb(n_all, k)
    # Python integers: C(N, n) overflows float64 for large N, the ratios never do
    w_max = np.array([math.comb(i, k - 1) / total for i in range(n_all)])
    return {"best": _mean_std(x, w_max), "worst": _mean_std(x, w_max[::-1].copy())}


def majority_value(values: Sequence[float], preds: Sequence[Any]) -> float:
    """Value of the first response with the most frequent ``pred`` (ties: the pred seen first)."""
    counts: dict[Any, int] = {}
    first: dict[Any, float] = {}
    for value, pred in zip(values, preds, strict=True):
        counts[pred] = counts.get(pred, 0) + 1
        first.setdefault(pred, float(value))
    top = max(counts, key=counts.__getitem__)  # dicts keep first-seen order, so ties go to it
    return first[top]


def majority_stats(
    values: Sequence[float], preds: Sequence[Any], subset_size: int, n_bootstrap: int = N_BOOTSTRAP, seed: int = 42
) -> tuple[float, float]:
    """(mean, std) over ``subset_size``-subsets of `majority_value` (module docstring).

    Exact when C(N, n) <= ``n_bootstrap`` (every subset, in response order); otherwise
    ``n_bootstrap`` subsets drawn uniformly without replacement (``RandomState(seed)``), each
    kept in response order so that ties resolve as in the exact case.

    Args:
        values: One prompt's N values.
        preds: The N extracted answers.
        subset_size: n, 1 <= n <= N.
        n_bootstrap: Largest number of subsets enumerated, and the number drawn otherwise.
        seed: Seed of the draws.
    """
    n_all, k = len(values), int(subset_size)
    if math.comb(n_all, k) <= n_bootstrap:
        idx = np.array(list(itertools.combinations(range(n_all), k)), dtype=np.int64).reshape(-1, k)
    else:
        keys = np.random.RandomState(seed).random_sample((n_bootstrap, n_all))
        idx = np.sort(np.argsort(keys, axis=1)[:, :k], axis=1)
    vals = np.asarray(values, dtype=np.float64)
    preds_arr = np.asarray([_hashable(p) for p in preds], dtype=object)
    maj = np.array([majority_value(vals[row], preds_arr[row]) for row in idx])
    return _mean_std(maj, np.full(len(maj), 1.0 / len(maj)))


def _hashable(x: Any) -> Any:
    return x if isinstance(x, (str, int, float, bool, type(None))) else repr(x)


def _is_numeric(values: list[Any]) -> bool:
    return (
        bool(values)
        and not isinstance(values[0], str)
        and all(isinstance(v, (int, float, np.integer, np.floating, bool, np.bool_)) for v in values)
    )


def _prompt_metrics(var_vals: list[float], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n = len(var_vals)
    out = {f"mean@{n}": float(np.mean(var_vals))}
    if n <= 1:
        return out
    out[f"std@{n}"] = float(np.std(var_vals))
    for size in subset_sizes(n):
        stats = best_worst_stats(var_vals, size)
        for kind in ("best", "worst"):
            out[f"{kind}@{size}/mean"], out[f"{kind}@{size}/std"] = stats[kind]
        if preds is not None:
            out[f"maj@{size}/mean"], out[f"maj@{size}/std"] = majority_stats(var_vals, preds, size, N_BOOTSTRAP, seed)
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
        seed: Seed of the ``maj@n`` subset draws (used only when the subsets are too many to enumerate).
    """
    grouped: dict[str, dict[str, dict[str, list[Any]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids, strict=True)):
        for var, vals in infos_dict.items():
            grouped[source][uid][var].append(vals[i])
    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for source, uid2vars in grouped.items():
        for var2vals in uid2vars.values():
            preds = var2vals.get("pred")
            for var, vals in var2vals.items():
                if var == "pred" or not _is_numeric(vals):
                    continue
                for name, value in _prompt_metrics([float(v) for v in vals], preds, seed).items():
                    per_prompt[source][var][name].append(value)
    return {
        s: {v: {m: float(np.mean(x)) for m, x in ms.items()} for v, ms in vs.items()} for s, vs in per_prompt.items()
    }


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


def _per_prompt_core_means(
    data_sources: Sequence[str], uids: Sequence[str], infos: dict[str, Sequence[Any]]
) -> list[float]:
    """Each prompt's mean of its data source's core variable (``acc`` when reported, else ``reward``)."""
    has_acc = {s for s, a in zip(data_sources, infos.get("acc") or [None] * len(data_sources)) if a is not None}
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for i, (source, uid) in enumerate(zip(data_sources, uids)):
        var = "acc" if source in has_acc and "acc" in infos else "reward"
        per[(source, uid)].append(float(infos[var][i]))
    return [float(np.mean(v)) for v in per.values()]
