"""``verl reward test [CONFIG] [key=value ...] [--dump PATH] [--rows N] [--json]``: probe the configured reward.

    verl reward test                                        # the quick start's reward (built-in arithmetic task)
    verl reward test gsm8k_grpo data.train_files=[data/gsm8k/train.parquet]
    verl reward test custom_reward_function.path=my_reward.py reward_model.timeout_s=2 --dump runs/rollouts

The config resolves exactly as for ``verl train`` (same loader, presets and overrides; no CONFIG =
the quick start): the scorer is what the training reward manager calls (``reward_model.reward_manager``
/ ``reward_manager.name`` ``naive``, ``dapo`` or ``batch``; ``custom_reward_function.{path,name,reward_kwargs}``
and ``reward_model.reward_kwargs`` bound, else the built-in scorer routed by data source), with
the per-sample deadline ``reward_model.timeout_s``. The rows are the first ``--rows`` (default 2)
rows of every data source of ``data.train_files`` (key ``data.reward_fn_key``; a preset's built-in
task when the files are ``builtin://...``). Each row yields the fixtures of `verl.reward.fixtures`
(trivial policies, the right answer in several spellings, long / unicode / truncated / ``<think>``
responses); ``--dump`` adds real responses: a ``trainer.rollout_data_dir`` or
``trainer.validation_data_dir`` (its ``<step>.jsonl`` files) or a JSON fixture exported by ``verl view``
(one object or a list). Every input is scored twice (`verl.reward.probe`) and the report printed as a
table, or as one JSON object with ``--json``.

Exit status: 0 when nothing is flagged ``fail`` (crash, timeout, non-determinism, a hackable
trivial policy, an unlearnable answer); 1 when something is; 2 for a bad config or usage.
``info`` notes (answer spellings below the best, dump scores that differ from the logged ones)
never change it. A batched scorer (``reward_manager=batch``) is called with batches of one.

Not supported yet (a one-line error): a reward model (``reward_model.enable=true``), verl-style or
``importlib`` reward-manager classes (they score DataProtos, not texts). The DAPO overlong penalty
(``reward_model.overlong_buffer``) depends on token counts; it is not applied here (the report says so).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verl.reward.fixtures import answer_fixtures, dependent_fixtures, prompt_text, trivial_fixtures
from verl.reward.probe import DUMP_KIND, Probe, analyse, score_probes

__all__ = ["main", "run_reward_test"]

USAGE = __doc__.split("\n\n")[1]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="verl reward test", description="Probe the configured reward scorer(s).")
    ap.add_argument("args", nargs="*", help="[CONFIG] [key=value ...] as for verl train")
    ap.add_argument(
        "--dump",
        action="append",
        default=[],
        metavar="PATH",
        help="a trainer.rollout_data_dir / validation_data_dir or a JSON fixture of verl view (repeatable)",
    )
    ap.add_argument("--rows", type=int, default=2, help="rows per data source that get the fixtures (default 2)")
    ap.add_argument("--json", action="store_true", help="print the report as one JSON object")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``verl reward test ...``; returns the exit status (module docstring)."""
    from verl.config.cli import DEFAULT_CONFIG, split_config_arg
    from verl.utils.errors import UserError

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(__doc__.split("\n\n")[0] + "\n\n" + USAGE)
        return 0 if args else 2
    if args[0] != "test":
        print(f"verl reward: unknown sub-command {args[0]!r}; valid: test", file=sys.stderr)
        return 2
    ns = _parser().parse_args(args[1:])
    if ns.rows < 1:
        raise UserError(f"--rows must be >= 1, got {ns.rows}")
    config_path, overrides = split_config_arg(ns.args, DEFAULT_CONFIG)
    report = run_reward_test(config_path, overrides, dumps=ns.dump, rows_per_source=ns.rows)
    print(json.dumps(report, ensure_ascii=False) if ns.json else render(report), flush=True)
    return 1 if report["failed"] else 0


def run_reward_test(
    config_path: str | None, overrides: Sequence[str], dumps: Sequence[str] = (), rows_per_source: int = 2
) -> dict[str, Any]:
    """Resolves the config, builds the probes, scores them twice and analyses them.

    Returns:
        `verl.reward.probe.analyse`'s report plus ``scorer`` (description), ``timeout_s``,
        ``notes`` and ``rows`` (data rows per source).

    Raises:
        ConfigError: a bad config, or a reward setup not supported yet (module docstring).
        DataError: a data or dump row without a data source or ground truth (file and row named),
            or a data source no built-in scorer handles.
        RewardFunctionError: a custom reward file or function that cannot be loaded.
    """
    from verl.config import load_config

    cfg = load_config(config_path, overrides)
    fn, description, notes = _scorer(cfg)
    rows = _data_rows(cfg, rows_per_source)
    dump_probes = [p for path in dumps for p in _dump_probes(path)]
    if description.startswith("built-in"):
        _check_sources([(p.source, p.label) for p in rows] + [(p.source, p.label) for p in dump_probes])
    timeout_s = cfg.reward_model.timeout_s
    # the answer spellings first: the robustness fixtures wrap the spelling the scorer rewards most
    answers = [
        Probe(r.source, f.kind, f.text, r.ground_truth, r.extra_info, r.label)
        for r in rows
        for f in answer_fixtures(r.ground_truth)
    ]
    answer_passes = score_probes(fn, answers, timeout_s)
    probes = [
        Probe(r.source, f.kind, f.text, r.ground_truth, r.extra_info, r.label)
        for r in rows
        for f in trivial_fixtures(r.solution_str, r.ground_truth)
    ]
    for r in rows:
        best = _best_spelling(r, answers, answer_passes[0])
        if best is not None:
            probes += [
                Probe(r.source, f.kind, f.text, r.ground_truth, r.extra_info, r.label) for f in dependent_fixtures(best)
            ]
    probes += dump_probes
    passes = score_probes(fn, probes, timeout_s)
    all_probes = answers + probes
    report = analyse(all_probes, [a + b for a, b in zip(answer_passes, passes, strict=True)])
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.source] = counts.get(r.source, 0) + 1
    return {
        "scorer": description,
        "timeout_s": timeout_s,
        "rows": counts,
        "dumps": list(dumps),
        "notes": notes,
        **report,
    }


def _best_spelling(row: Probe, answers: list[Probe], scored: list[Any]) -> str | None:
    """The row's answer spelling with the highest first-pass score (the first on ties)."""
    best, best_score = None, None
    for p, s in zip(answers, scored, strict=True):
        if p.label == row.label and p.source == row.source and (best_score is None or s.score > best_score):
            best, best_score = p.solution_str, s.score
    return best


def _scorer(cfg: Any) -> tuple[Callable[..., Any], str, list[str]]:
    """The per-sample scorer of the training manager, its description and notes."""
    from verl.config import ConfigError
    from verl.trainer.ppo.reward import training_scorer

    if cfg.reward_model.enable:
        raise ConfigError(
            "reward_model.enable: scoring with a reward model is not supported yet by verl reward test "
            "(it probes rule / custom scorers)"
        )
    if cfg.reward_manager.source == "importlib" and cfg.reward_manager.module.path:
        raise ConfigError("reward_manager.module.path: a reward-manager class is not supported yet by verl reward test")
    from verl.reward import REWARD_MANAGERS
    from verl.utils.registry import RegistryError

    from verl.run.preflight import check_reward_function

    check_reward_function(cfg)  # the same one-line signature check as verl train's pre-flight
    name, fn = training_scorer(cfg)
    try:
        factory = REWARD_MANAGERS.get(name)
    except RegistryError as e:
        raise ConfigError(f"reward_model.reward_manager / reward_manager.name: {e}") from None
    per_sample = getattr(factory, "per_sample_scorer", None)
    if per_sample is None:
        raise ConfigError(
            f"reward manager {name!r} scores whole batches its own way (no per-sample scorer), which verl "
            f"reward test does not support yet; use naive, dapo or batch"
        )
    notes = []
    if cfg.reward_model.overlong_buffer.enable:
        notes.append(
            "reward_model.overlong_buffer: the DAPO overlong penalty depends on token counts and is not applied here"
        )
    f = cfg.custom_reward_function
    what = f"custom {f.name} in {f.path}" if f.path else "built-in (routed by data source)"
    if fn is not None and getattr(factory, "per_sample_note", None):
        notes.append(f"reward manager {name!r}: {factory.per_sample_note}")
    return per_sample(fn), f"{what}, reward manager {name!r}", notes


def _row_probe(
    source: Any,
    truth: Any,
    extra: Any,
    prompt: Any,
    where: str,
    fields: tuple[str, str] = ("'data_source' (data.reward_fn_key)", "'reward_model.ground_truth'"),
) -> Probe:
    """A row as a `Probe` whose ``solution_str`` holds the prompt text (for ``copy_prompt``).

    Args:
        fields: How the data source and ground-truth fields are named in errors.

    Raises:
        DataError: a data source that is not a string, or no ground truth (``where`` named).
    """
    from verl.utils.errors import DataError

    if not isinstance(source, str):
        raise DataError(f"{where}: field {fields[0]} must be a string, got {source!r:.80}")
    if truth is None:
        raise DataError(f"{where}: field {fields[1]} is missing")
    return Probe(source, "row", prompt_text(prompt), truth, dict(extra) if isinstance(extra, dict) else {}, where)


def _data_rows(cfg: Any, per_source: int) -> list[Probe]:
    """The first ``per_source`` rows of each data source of ``data.train_files`` (file order)."""
    from verl.commands.generate import read_data_rows
    from verl.utils.errors import DataError

    d = cfg.data
    out: list[Probe] = []
    taken: dict[str, int] = {}
    for path in d.train_files:
        rows, labels = read_data_rows(path, key="data.train_files")
        for row, label in zip(rows, labels, strict=True):
            where = f"{path}: {label}"
            if not isinstance(row, dict):
                raise DataError(f"{where}: row is a {type(row).__name__}, expected an object")
            rm = row.get("reward_model")
            probe = _row_probe(
                row.get(d.reward_fn_key),
                rm.get("ground_truth") if isinstance(rm, dict) else None,
                row.get("extra_info"),
                row.get(d.prompt_key),
                where,
                (f"'{d.reward_fn_key}' (data.reward_fn_key)", "'reward_model.ground_truth'"),
            )
            if taken.get(probe.source, 0) < per_source:
                taken[probe.source] = taken.get(probe.source, 0) + 1
                out.append(probe)
    return out


def _dump_probes(path: str) -> list[Probe]:
    """Real responses: a rollout dump directory, or a JSON fixture file (one object or a list)."""
    from verl.utils.errors import DataError

    p = Path(path)
    if p.is_dir():
        from verl.commands.viewer.data import load_dump

        out = []
        for sd in load_dump(p):
            for i, row in enumerate(sd.rows):
                where = f"{sd.source}: row {i}"
                base = _row_probe(
                    row.get("data_source"),
                    row.get("gts"),
                    row.get("extra_info"),
                    row.get("input"),
                    where,
                    ("'data_source'", "'gts'"),
                )
                out.append(_as_dump(base, row.get("output"), row.get("score"), where))
        return out
    if not p.is_file():
        raise DataError(f"--dump {path}: no such file or directory")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DataError(f"--dump {path}: not JSON ({err.msg} at line {err.lineno})") from None
    items = data if isinstance(data, list) else [data]
    out = []
    for i, item in enumerate(items):
        where = f"{path}: fixture {i}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: expected an object with data_source, solution_str, ground_truth")
        base = _row_probe(
            item.get("data_source"),
            item.get("ground_truth"),
            item.get("extra_info"),
            item.get("prompt"),
            where,
            ("'data_source'", "'ground_truth'"),
        )
        out.append(_as_dump(base, item.get("solution_str"), item.get("expected_score"), where))
    return out


def _as_dump(base: Probe, text: Any, logged: Any, where: str) -> Probe:
    from verl.utils.errors import DataError

    if not isinstance(text, str):
        raise DataError(f"{where}: the response (output / solution_str) must be a string, got {text!r:.80}")
    score = float(logged) if isinstance(logged, (int, float)) and not isinstance(logged, bool) else None
    return Probe(base.source, DUMP_KIND, text, base.ground_truth, base.extra_info, where, score)


def _check_sources(sources: list[tuple[str, str]]) -> None:
    """Each data source once, at its first row: a source no built-in scorer handles is a DataError naming the row."""
    from verl.reward.manager_steps import check_data_sources
    from verl.utils.errors import DataError
    from verl.utils.registry import RegistryError

    first: dict[str, str] = {}
    for source, where in sources:
        first.setdefault(source, where)
    for source, where in first.items():
        try:
            check_data_sources([source])
        except RegistryError as e:
            raise DataError(f"{where}: {e}") from None


def _fmt(x: Any, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def render(report: dict[str, Any]) -> str:
    """The report as text: a table of fixture kinds per data source, then the flags and the verdict."""
    from rich.console import Console
    from rich.table import Table

    console = Console(
        width=120,
        record=True,
        file=io.StringIO(),
        color_system=None,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=True,
    )
    console.print(f"scorer: {report['scorer']}; deadline {report['timeout_s']} s per call; every input scored twice")
    for note in report["notes"]:
        console.print(f"note: {note}")
    for source, s in report["sources"].items():
        table = Table(
            title=f"data source {source!r}: {report['rows'].get(source, 0)} data rows, {s['calls']} calls",
            title_justify="left",
            box=None,
            pad_edge=False,
        )
        for col in ("fixture", "group", "n", "mean", "min", "max", "errors", "timeouts", "differ", "p50 ms"):
            table.add_column(col, justify="left" if col in ("fixture", "group") else "right")
        for kind, k in s["kinds"].items():
            table.add_row(
                kind,
                k["group"],
                str(k["n"]),
                _fmt(k["mean"]),
                _fmt(k["min"]),
                _fmt(k["max"]),
                str(k["errors"]),
                str(k["timeouts"]),
                str(k["nondeterministic"]),
                _fmt(k["p50_ms"], 3),
            )
        console.print(table)
        lat, rng = s["latency_ms"], s["range"]
        console.print(
            f"latency p50 {_fmt(lat['p50'], 3)} ms, p99 {_fmt(lat['p99'], 3)} ms, max {_fmt(lat['max'], 3)} ms; "
            f"scores {'-' if rng is None else f'[{rng[0]:.4g}, {rng[1]:.4g}]'} ({s['sign']})"
        )
    fails = [f for f in report["flags"] if f["severity"] == "fail"]
    for f in report["flags"]:
        console.print(
            f"{'FAIL' if f['severity'] == 'fail' else 'info'} {f['check']:<16} [{f['source']}] {f['message']}"
        )
    n_info = len(report["flags"]) - len(fails)
    console.print(f"result: {len(fails)} failure(s), {n_info} note(s) -> exit {1 if fails else 0}")
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).strip()
