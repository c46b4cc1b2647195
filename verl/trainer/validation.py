"""Validation metrics per data source: mean@N, best@N and maj@N.

For each prompt with N sampled responses (``rollout.val_kwargs.n``):
- ``mean@N``: mean score over all N responses;
- ``best@N``: max score over the N responses (pass@N for 0/1 scores);
- ``maj@N``: score of a response carrying the most frequent answer (majority vote; the answer
  is the scorer's ``pred`` when it reports one, else the stripped response text).
Each is averaged over the prompts of a data source and logged as
``val-core/<data_source>/reward/{mean,best,maj}@N``; ``val/accuracy`` is the mean@N over all
prompts (0/1 scores: accuracy).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

import numpy as np


def process_validation_metrics(
    data_sources: Sequence[str], uids: Sequence[str], scores: Sequence[float], answers: Sequence[str]
) -> dict[str, float]:
    """Aggregate per-response validation results (all sequences of length B) into metrics."""
    groups: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
    for ds, uid, s, a in zip(data_sources, uids, scores, answers):
        groups[(ds, uid)].append((float(s), a))
    per_source: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (ds, _), items in groups.items():
        n = len(items)
        vals = [s for s, _ in items]
        per_source[ds][f"mean@{n}"].append(float(np.mean(vals)))
        per_source[ds][f"best@{n}"].append(max(vals))
        top_answer, _ = Counter(a for _, a in items).most_common(1)[0]
        per_source[ds][f"maj@{n}"].append(next(s for s, a in items if a == top_answer))
    out: dict[str, float] = {}
    for ds, metrics in per_source.items():
        for name, vals in metrics.items():
            out[f"val-core/{ds}/reward/{name}"] = float(np.mean(vals))
    out["val/accuracy"] = float(np.mean([np.mean([s for s, _ in items]) for items in groups.values()])) if groups else 0.0
    return out
