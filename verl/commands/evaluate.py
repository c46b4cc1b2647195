"""Offline scoring of generated responses (verl's ``main_eval``): ``verl eval [CONFIG] data.path=gen.parquet``.

    verl eval data.path=gen.parquet [custom_reward_function.path=my_reward.py]
    python -m verl.trainer.main_eval ...             # verl's entry point, same keys

Keys are verl's ``evaluation.yaml`` (`verl.config.offline.load_eval_config`): ``data.path``,
``data.{prompt_key,response_key,data_source_key,reward_model_key}``,
``custom_reward_function.{path,name,reward_kwargs}``, plus ``reward_model.timeout_s``.

Each row's responses (a list of strings, `verl.trainer.main_generation`'s ``responses``) are
scored against ``row[reward_model_key]["ground_truth"]`` by the custom function, or by the
built-in scorer routed by the row's data source (`verl.reward.scorers.default_compute_score`), as
in training: the same ``fn(data_source=, solution_str=, ground_truth=, extra_info=)`` call, a
float or a dict with ``score``, through the same scoring core and failure policy as the reward
managers (`verl.reward.scoring`): the responses are scored in one scorer thread, each with its own
``reward_model.timeout_s`` deadline; one that raises, returns a non-number or NaN, or runs past
the deadline scores 0 and is counted (``num_errors``, non-finite scores included, as training's
``reward/num_errors``; ``num_nonfinite``; ``num_timeouts``), the first of each kind printed with
its message. The file is the policy's one step (``patience`` 1): 3 timeouts in a row anywhere in
the file stop the evaluation with an error naming the row (a hung scorer would otherwise cost
``timeout_s`` per remaining response, hours on a large file, or silently score them 0), and a
scorer that fails on every response is an error too, not a score of 0.

Metrics, per data source ``ds`` (rows with n responses each):

* ``test_score/<ds>``: mean over rows of the mean score of the row's responses — verl's
  ``main_eval`` figure (mean@n);
* ``test_score/<ds>/best@n``: mean over rows of the best score of the row's responses (pass@n for
  0/1 scores), with n the responses per row (``best@var`` when rows differ);
* ``num_rows/<ds>``, and overall ``num_errors``, ``num_timeouts``, ``num_nonfinite``.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

__all__ = ["evaluate", "main"]

USAGE = __doc__.split("\n\n")[1]


def _responses(value: Any) -> list[str] | None:
    """A row's responses as a list: one string, or a non-empty sequence of strings (a list, or the
    numpy array a pandas-written parquet gives); None for anything else."""
    if isinstance(value, str):
        return [value]
    try:
        items = list(value)
    except TypeError:
        return None
    return items if items and all(isinstance(x, str) for x in items) else None


def evaluate(cfg: Any, log: Any = None) -> dict[str, float]:
    """Score ``cfg.data.path`` (a loaded `verl.config.offline.EvalConfig`); returns the metrics above.

    Raises:
        DataError: a row without a data source, responses or ground truth (file and row named);
        RegistryError: with the built-in scorers, a data source none of them handles;
        RewardFunctionError: a custom reward file or function that cannot be loaded;
        RewardFailureError (a RewardFunctionError): a scorer that failed on every response (its
            first failure of each kind named) or timed out on 3 in a row (the row named).

    Failures on some responses are reported through ``log`` (default: stderr), the first of each
    kind with its message, and counted in the metrics.
    """
    from verl.commands.generate import read_data_rows
    from verl.reward.loader import load_custom_reward_fn
    from verl.reward.manager_steps import check_data_sources
    from verl.reward.scorers import default_compute_score
    from verl.reward.scoring import COUNTERS, RewardFailurePolicy, score_calls
    from verl.reward.timeout import TimeoutCaller
    from verl.utils.errors import DataError
    from verl.utils.registry import RegistryError

    if log is None:

        def log(message: str) -> None:
            print(message, file=sys.stderr, flush=True)

    d, f = cfg.data, cfg.custom_reward_function
    rows, labels = read_data_rows(d.path)
    parsed = []
    for row, label in zip(rows, labels, strict=True):
        where = f"{d.path}: {label}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: row is a {type(row).__name__}, expected an object")
        source, responses, rm = (
            row.get(d.data_source_key),
            _responses(row.get(d.response_key)),
            row.get(d.reward_model_key),
        )
        if not isinstance(source, str):
            raise DataError(
                f"{where}: field '{d.data_source_key}' (data.data_source_key) must be a string, got {source!r:.80}"
            )
        if responses is None:
            raise DataError(
                f"{where}: field '{d.response_key}' (data.response_key) must be a non-empty list of strings, "
                f"got {row.get(d.response_key)!r:.80}"
            )
        if not isinstance(rm, dict) or rm.get("ground_truth") is None:
            raise DataError(f"{where}: field '{d.reward_model_key}.ground_truth' (data.reward_model_key) is missing")
        parsed.append((source, responses, rm["ground_truth"], row.get("extra_info")))
    fn = load_custom_reward_fn(f.path, f.name, dict(f.reward_kwargs))
    if fn is None:
        first_row: dict[str, int] = {}  # each data source once, at its first row (file order)
        for i, (source, *_rest) in enumerate(parsed):
            first_row.setdefault(source, i)
        for source, i in first_row.items():
            try:
                check_data_sources([source])
            except RegistryError as e:
                raise DataError(f"{d.path}: {labels[i]}: {e}") from None
        fn = default_compute_score
    calls = [
        {"data_source": source, "solution_str": text, "ground_truth": truth, "extra_info": extra}
        for source, responses, truth, extra in parsed
        for text in responses
    ]
    row_of = [i for i, p in enumerate(parsed) for _ in p[1]]
    results, counts = score_calls(
        fn,
        calls,
        TimeoutCaller(cfg.reward_model.timeout_s),
        lambda j: f"{d.path}: {labels[row_of[j]]} (data_source={parsed[row_of[j]][0]!r})",
    )
    RewardFailurePolicy(patience=1, timeout_s=cfg.reward_model.timeout_s, noun="response").check(counts)
    means, bests, sizes = defaultdict(list), defaultdict(list), defaultdict(set)
    scored = iter(results)
    for source, responses, _truth, _extra in parsed:
        scores = [next(scored).score for _ in responses]
        means[source].append(sum(scores) / len(scores))
        bests[source].append(max(scores))
        sizes[source].add(len(scores))
    metrics: dict[str, float] = {}
    for source in means:
        n = sizes[source]
        metrics[f"test_score/{source}"] = sum(means[source]) / len(means[source])
        metrics[f"test_score/{source}/best@{n.pop() if len(n) == 1 else 'var'}"] = sum(bests[source]) / len(
            bests[source]
        )
        metrics[f"num_rows/{source}"] = float(len(means[source]))
    metrics.update(counts.metrics(prefix=""))
    for kind, message in counts.first.items():
        number = {"error": counts.errors, "nonfinite": counts.nonfinite, "timeout": counts.timeouts}[kind]
        log(f"warning: {number} responses scored 0 ({COUNTERS[kind]}); the first: {message}")
    return metrics


def main(argv: Sequence[str] | None = None) -> int:
    """``verl eval [CONFIG] [key=value ...]``: prints the metrics as one JSON object; returns the exit status."""
    from verl.config.cli import config_command
    from verl.config.offline import load_eval_config

    def body(config_path: str | None, overrides: list[str]) -> int:
        print(json.dumps(evaluate(load_eval_config(config_path, overrides))), flush=True)
        return 0

    return config_command(argv, USAGE, "verl eval", body)


if __name__ == "__main__":
    from verl.cli import run_reporting_user_errors

    sys.exit(run_reporting_user_errors("python -m verl.trainer.main_eval", main, sys.argv[1:]))
