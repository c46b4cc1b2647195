"""Probing a scorer with fixed responses: crashes, timeouts, latency, range, determinism, hackability.

The engine of ``verl reward test`` (`verl.commands.reward_test`). A `Probe` is one scorer call
(``fn(data_source=, solution_str=, ground_truth=, extra_info=)``, the reward managers' call);
`score_probes` makes every call twice through the managers' own scoring core
(`verl.reward.scoring.score_calls`: the managers' per-sample deadline, their stop after
`verl.reward.scoring.MAX_CONSECUTIVE_TIMEOUTS` timeouts in a row, and a raise, a non-number or
NaN scoring 0.0, as in training), and `analyse` turns the two passes into a report.

What is flagged (``severity`` ``fail``: the exit status of ``verl reward test`` is 1):

* ``crash`` — a call raised or returned something that is not a finite number; one flag per
  exception type and first message line, with the count per fixture kind;
* ``timeout`` — a call ran past the deadline (or was skipped after 3 timeouts in a row);
* ``nondeterministic`` — the two calls on one input disagree (status, or score by more than 1e-9);
* ``hackable`` — a ``trivial`` fixture kind (`verl.reward.fixtures`) whose mean reward is above 0,
  or above the empty response's mean: a policy that solves nothing collects it;
* ``unlearnable`` — no spelling of the right answer scores above the empty response.

Latency percentiles are over the calls that returned (raised or not); timeouts are counted apart.
The first pass's scores give the means (a failed call counts 0.0).

``severity`` ``info`` (reported, exit status unchanged): a spelling of the right answer that
scores below the best one; ``long`` / ``unicode`` / ``think_answer_after`` below the best
spelling; ``truncated`` or ``think_answer_inside`` earning as much as the best spelling (above
the empty response); dump rows whose score differs from the score logged in the dump.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from verl.reward.fixtures import FIXTURE_GROUPS, GROUP_OF
from verl.reward.scoring import score_calls
from verl.reward.timeout import TimeoutCaller

__all__ = ["Probe", "Scored", "analyse", "score_probes"]

EPS = 1e-9
"""Two scores closer than this are equal (determinism, thresholds)."""

DUMP_KIND = "dump"
"""Fixture kind of the real responses read from a rollout dump."""


@dataclass(frozen=True)
class Probe:
    """One scorer input.

    Attributes:
        source: The data source (``data.reward_fn_key`` of the row).
        kind: A fixture kind of `verl.reward.fixtures`, or `DUMP_KIND` (``"row"`` for a data row
            that fixtures are built from, never scored).
        solution_str: The response text.
        ground_truth: The row's ``reward_model.ground_truth``.
        extra_info: The row's ``extra_info`` (a dict, as the managers pass it).
        label: Where the row comes from, for messages (``train.jsonl row 3``).
        logged_score: The score a rollout dump recorded for this response (dump rows only).
    """

    source: str
    kind: str
    solution_str: str
    ground_truth: Any
    extra_info: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    logged_score: float | None = None


@dataclass(frozen=True)
class Scored:
    """One call's result.

    Attributes:
        status: ``ok``, ``error`` (raised, or not a finite number) or ``timeout``.
        score: The reward the managers would use (0.0 unless ok).
        seconds: Wall time of the call; None for a timeout.
        error_type: Exception class name, ``InvalidScore`` for an unusable return value, "" when ok.
        error_line: First line of the exception message (or why the value is unusable).
    """

    status: Literal["ok", "error", "timeout"]
    score: float = 0.0
    seconds: float | None = None
    error_type: str = ""
    error_line: str = ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def _one_pass(fn: Callable[..., Any], probes: Sequence[Probe], caller: TimeoutCaller) -> list[Scored]:
    """Every probe once, in order, through `score_calls`."""
    seconds: dict[int, float] = {}
    raised: dict[int, tuple[str, str]] = {}

    def timed(_probe_index: int, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(**kwargs)
        except BaseException as exc:  # re-raised: call_many turns it into an "error" outcome
            raised[_probe_index] = (type(exc).__name__, _first_line(exc))
            raise
        finally:
            seconds[_probe_index] = time.perf_counter() - start

    calls = [
        {
            "_probe_index": i,
            "data_source": p.source,
            "solution_str": p.solution_str,
            "ground_truth": p.ground_truth,
            "extra_info": p.extra_info,
        }
        for i, p in enumerate(probes)
    ]
    results, _counts = score_calls(timed, calls, caller)
    out = []
    for i, result in enumerate(results):
        if result.status == "timeout":
            out.append(Scored("timeout", error_type="Timeout", error_line=result.message))
        elif result.status == "error":
            kind, line = raised.get(i, ("InvalidScore", result.message))
            out.append(Scored("error", seconds=seconds.get(i), error_type=kind, error_line=line))
        else:
            out.append(Scored("ok", result.score, seconds.get(i)))
    return out


def score_probes(
    fn: Callable[..., Any], probes: Sequence[Probe], timeout_s: float | None, repeats: int = 2
) -> list[list[Scored]]:
    """Scores every probe ``repeats`` times (all probes, then all again).

    Args:
        fn: The scorer, ``fn(data_source=, solution_str=, ground_truth=, extra_info=)``.
        probes: The inputs.
        timeout_s: Deadline per call in seconds (``reward_model.timeout_s``; None or <= 0: none).
        repeats: Passes over the probes (2 for the determinism check).

    Returns:
        ``repeats`` lists of one `Scored` per probe.
    """
    caller = TimeoutCaller(timeout_s)
    return [_one_pass(fn, probes, caller) for _ in range(repeats)]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _kind_stats(scored: list[tuple[Probe, Scored, Scored]]) -> dict[str, Any]:
    scores = [s.score for _, s, _ in scored]
    return {
        "n": len(scored),
        "mean": _mean(scores),
        "min": min(scores) if scores else None,
        "max": max(scores) if scores else None,
        "errors": sum(s.status == "error" for _, s, _ in scored),
        "timeouts": sum(s.status == "timeout" for _, s, _ in scored),
        "skipped": sum(s.status == "timeout" and s.error_line.startswith("skipped") for _, s, _ in scored),
        "nondeterministic": sum(_differ(a, b) for _, a, b in scored),
        "p50_ms": _pct([s.seconds for _, s, _ in scored], 50),
    }


def _differ(a: Scored, b: Scored) -> bool:
    return a.status != b.status or abs(a.score - b.score) > EPS


def _pct(seconds: Sequence[float | None], q: float) -> float | None:
    done = [s for s in seconds if s is not None]
    return float(np.percentile(done, q)) * 1e3 if done else None


def _sign(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "none (no call returned a score)"
    if low >= 0 and high <= 0:
        return "zero only"
    return "non-negative" if low >= 0 else ("non-positive" if high <= 0 else "mixed")


def analyse(probes: Sequence[Probe], passes: Sequence[Sequence[Scored]]) -> dict[str, Any]:
    """The report of `score_probes`' two passes, per data source (module docstring).

    Args:
        probes: The inputs, as scored.
        passes: Two lists of one `Scored` per probe.

    Returns:
        ``{"sources": {source: {"calls", "kinds", "latency_ms", "range", "sign", "crashes", "timeouts",
        "nondeterministic", "dump"}}, "flags": [{"severity", "source", "check", "kind", "message"}],
        "failed": bool}``; ``kinds`` maps each fixture kind to ``n``, ``mean`` (failed calls count
        0.0, as in training), ``min``, ``max``, ``errors``, ``timeouts``, ``skipped`` (timeouts not
        run after 3 in a row), ``nondeterministic``, ``p50_ms`` (milliseconds), ``group``.
    """
    first, second = passes[0], passes[1] if len(passes) > 1 else passes[0]
    by_source: dict[str, list[tuple[Probe, Scored, Scored]]] = defaultdict(list)
    for p, a, b in zip(probes, first, second, strict=True):
        by_source[p.source].append((p, a, b))
    sources, flags = {}, []
    for source, items in by_source.items():
        report, source_flags = _analyse_source(source, items)
        sources[source] = report
        flags += source_flags
    return {"sources": sources, "flags": flags, "failed": any(f["severity"] == "fail" for f in flags)}


def _flag(flags: list[dict[str, Any]], severity: str, source: str, check: str, kind: str, message: str) -> None:
    flags.append({"severity": severity, "source": source, "check": check, "kind": kind, "message": message})


def _analyse_source(
    source: str, items: list[tuple[Probe, Scored, Scored]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    order = [k for ks in FIXTURE_GROUPS.values() for k in ks] + [DUMP_KIND]
    by_kind: dict[str, list[tuple[Probe, Scored, Scored]]] = defaultdict(list)
    for item in items:
        by_kind[item[0].kind].append(item)
    kinds = {k: {**_kind_stats(by_kind[k]), "group": GROUP_OF.get(k, DUMP_KIND)} for k in order if k in by_kind}
    calls = [s for _, a, b in items for s in (a, b)]
    ok = [s.score for s in calls if s.status == "ok"]
    crashes: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for p, a, b in items:
        for s in (a, b):
            if s.status == "error":
                crashes[(s.error_type, s.error_line)][p.kind] += 1
    nondet = [
        {"kind": p.kind, "label": p.label, "first": _show(a), "second": _show(b)} for p, a, b in items if _differ(a, b)
    ]
    report: dict[str, Any] = {
        "calls": len(calls),
        "kinds": kinds,
        "latency_ms": {
            "p50": _pct([s.seconds for s in calls], 50),
            "p99": _pct([s.seconds for s in calls], 99),
            "max": _pct([s.seconds for s in calls], 100),
        },
        "range": [min(ok), max(ok)] if ok else None,
        "sign": _sign(min(ok) if ok else None, max(ok) if ok else None),
        "crashes": [
            {"type": t, "message": m, "count": sum(c.values()), "kinds": dict(c)} for (t, m), c in crashes.items()
        ],
        "timeouts": {k: v["timeouts"] for k, v in kinds.items() if v["timeouts"]},
        "nondeterministic": nondet,
    }
    if DUMP_KIND in by_kind:
        report["dump"] = _dump_summary(by_kind[DUMP_KIND])
    return report, _source_flags(source, report, kinds)


def _show(s: Scored) -> str:
    return f"{s.score:.6g}" if s.status == "ok" else s.status


def _dump_summary(items: list[tuple[Probe, Scored, Scored]]) -> dict[str, Any]:
    logged = [(p, a) for p, a, _ in items if p.logged_score is not None]
    differ = [
        {"label": p.label, "logged": p.logged_score, "now": a.score}
        for p, a in logged
        if abs(a.score - p.logged_score) > 1e-6
    ]
    return {
        "rows": len(items),
        "with_logged_score": len(logged),
        "differs_from_logged": len(differ),
        "examples": differ[:5],
    }


def _source_flags(source: str, report: dict[str, Any], kinds: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    flags: list[dict[str, Any]] = []
    for crash in report["crashes"]:
        per_kind = ", ".join(f"{k} x{n}" for k, n in crash["kinds"].items())
        _flag(
            flags,
            "fail",
            source,
            "crash",
            ",".join(crash["kinds"]),
            f"{crash['type']}: {crash['message']} ({crash['count']} calls: {per_kind})",
        )
    for kind, n in report["timeouts"].items():
        skipped = kinds[kind]["skipped"]
        not_run = f" ({skipped} not run: the scorer kept timing out)" if skipped else ""
        _flag(
            flags,
            "fail",
            source,
            "timeout",
            kind,
            f"{n} of {kinds[kind]['n']} {kind} responses ran past the deadline{not_run}",
        )
    if report["nondeterministic"]:
        nd = report["nondeterministic"]
        _flag(
            flags,
            "fail",
            source,
            "nondeterministic",
            ",".join(dict.fromkeys(d["kind"] for d in nd)),
            f"{len(nd)} inputs scored differently twice, e.g. {nd[0]['kind']} ({nd[0]['label']}): "
            f"{nd[0]['first']} then {nd[0]['second']}",
        )
    empty = kinds.get("empty", {}).get("mean")
    base = 0.0 if empty is None else min(0.0, empty)
    for kind, st in kinds.items():
        if st["group"] == "trivial" and st["mean"] is not None and st["mean"] > base + EPS:
            than = "0" if base == 0.0 or kind == "empty" else f"the empty response's {empty:.4g}"
            _flag(
                flags,
                "fail",
                source,
                "hackable",
                kind,
                f"trivial policy '{kind}' earns mean reward {st['mean']:.4g} > {than}",
            )
    answers = {k: st["mean"] for k, st in kinds.items() if st["group"] == "answer" and st["mean"] is not None}
    # a kind that crashed or timed out is flagged as such above, not again as a low-scoring spelling
    clean = {k for k, st in kinds.items() if not st["errors"] and not st["timeouts"]}
    if answers:
        best_kind = max(answers, key=lambda k: answers[k])
        best = answers[best_kind]
        if empty is not None and best <= empty + EPS:
            _flag(
                flags,
                "fail",
                source,
                "unlearnable",
                best_kind,
                f"the right answer scores at most {best:.4g}, no more than the empty response ({empty:.4g})",
            )
        for kind, mean in answers.items():
            if mean < best - EPS and kind in clean:
                _flag(
                    flags,
                    "info",
                    source,
                    "spelling",
                    kind,
                    f"right answer as {kind} scores {mean:.4g} < {best:.4g} ({best_kind})",
                )
        _robustness_flags(flags, source, {k: v for k, v in kinds.items() if k in clean}, best, best_kind, empty)
    if "dump" in report and report["dump"]["differs_from_logged"]:
        d = report["dump"]
        _flag(
            flags,
            "info",
            source,
            "dump_score",
            DUMP_KIND,
            f"{d['differs_from_logged']} of {d['with_logged_score']} dump responses score differently from the logged "
            f"score (e.g. {d['examples'][0]['label']}: logged {d['examples'][0]['logged']:.4g}, "
            f"now {d['examples'][0]['now']:.4g})",
        )
    return flags


def _robustness_flags(
    flags: list[dict[str, Any]],
    source: str,
    kinds: dict[str, dict[str, Any]],
    best: float,
    best_kind: str,
    empty: float | None,
) -> None:
    for kind in ("long", "unicode", "think_answer_after"):
        mean = kinds.get(kind, {}).get("mean")
        if mean is not None and mean < best - EPS:
            _flag(
                flags,
                "info",
                source,
                "robustness",
                kind,
                f"{kind} (the {best_kind} answer inside it) scores {mean:.4g} < {best:.4g}",
            )
    floor = 0.0 if empty is None else empty
    for kind in ("truncated", "think_answer_inside"):
        mean = kinds.get(kind, {}).get("mean")
        if mean is not None and mean >= best - EPS and mean > floor + EPS:
            _flag(flags, "info", source, "robustness", kind, f"{kind} earns {mean:.4g}, as much as the full answer")
