"""Reading a ``trainer.rollout_data_dir`` (or validation dump) and packing it for the page (`verl.commands.viewer`).

A dump directory holds ``<step>.jsonl`` (one trajectory per line, `verl.trainer.ppo.dumps`) and,
for dumps written since the token-level view exists, ``<step>.tokens.npz`` with the same rows in
the same order. `load_dump` reads both; `pack` turns them into the page's payload:

- ``meta`` (JSON): one column per row summary (step, group, score, lengths, truncated, tool
  calls and errors, log-prob gap ``max |rollout - training|`` and its mean over trained
  tokens, mean advantage and entropy, a snippet of the response), the run overview per step
  (mean reward, mean response length, accuracy) and the text piece of every token id.
- ``rows``: per trajectory one zlib-compressed, base64 chunk, decoded only when the row is
  shown: a 16-byte header ``(json_bytes, P, R, flags)`` (uint32), then the prompt and response
  token indices into ``meta.vocab`` (uint16 or uint32), then ``response_mask`` (uint8), then
  each per-token quantity (float16: ``old_log_probs``, gap ``rollout - old``, ``entropys``,
  ``advantages``; flag bits 1, 2, 4, 8 say which are present), multi-byte arrays stored byte
  plane by byte plane (low bytes, then high bytes: they compress better), then the row's JSON
  (the dump row without ``input`` / ``output``).
- ``text`` (one zlib, base64 blob): ``[[input, output], ...]`` for search and export.

Float16 keeps three significant digits; the gap is stored as its own array so gaps of 1e-5
survive (a difference of two float16 log-probs would not).
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from verl.utils.errors import DataError

__all__ = ["QUANTITIES", "StepDump", "load_dump", "pack"]

QUANTITIES: dict[str, int] = {"old_log_probs": 1, "gap": 2, "entropys": 4, "advantages": 8}
"""Per-token float16 arrays of a row chunk, in stored order, with their flag bit."""

TEXT_FIELDS = ("input", "output")
TOOL_FAILURES = frozenset({"error", "timeout", "malformed"})
SNIPPET_CHARS = 160


@dataclass
class StepDump:
    """One step of a dump: its rows (dicts as written) and, when present, the token arrays."""

    step: int
    rows: list[dict[str, Any]]
    tokens: dict[str, np.ndarray] | None = None
    source: Path = field(default_factory=Path)


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{n}: not a JSON object ({err.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def load_dump(directory: str | Path) -> list[StepDump]:
    """Every ``<step>.jsonl`` of ``directory`` (with its ``<step>.tokens.npz`` when present), by step.

    Raises:
        DataError: no such directory, no ``<step>.jsonl`` in it, a line that is not a JSON
            object, or a tokens file whose row count differs from its JSONL's.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DataError(f"{root}: not a directory (expected a trainer.rollout_data_dir)")
    files = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := re.fullmatch(r"(\d+)\.jsonl", p.name)))
    if not files:
        raise DataError(f"{root}: no <step>.jsonl files (is it a trainer.rollout_data_dir?)")
    steps = []
    for step, path in files:
        rows = _read_jsonl(path)
        npz = root / f"{step}.tokens.npz"
        tokens = None
        if npz.exists():
            with np.load(npz, allow_pickle=False) as z:
                tokens = {k: z[k] for k in z.files}
            n = len(tokens["response_offsets"]) - 1
            if n != len(rows):
                raise DataError(
                    f"{npz}: {n} rows but {path.name} has {len(rows)}; the two files are from different runs"
                )
        steps.append(StepDump(step, rows, tokens, path))
    return steps


def _b64z(data: bytes) -> str:
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def _planes(a: np.ndarray) -> bytes:
    """Bytes of ``a`` (little-endian) byte plane by byte plane."""
    raw = np.ascontiguousarray(a).view(np.uint8).reshape(len(a), a.dtype.itemsize)
    return raw.T.tobytes()


def _f16(a: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.clip(a, -65504, 65504).astype("<f2")


class _Vocab:
    """One index over the token ids of every step (one tokenizer per run), with their pieces."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.ids: list[int] = []
        self.pieces: list[str] = []

    def add(self, tokens: dict[str, np.ndarray]) -> None:
        """Index this step's ``vocab_ids`` (first piece seen wins)."""
        off, blob = tokens["vocab_offsets"], tokens["vocab_bytes"].tobytes()
        for j, tid in enumerate(tokens["vocab_ids"].tolist()):
            if tid not in self.index:
                self.index[tid] = len(self.ids)
                self.ids.append(tid)
                self.pieces.append(blob[off[j] : off[j + 1]].decode("utf-8", "replace"))

    def remap(self, tokens: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
        """Global index of each token of ``ids`` (which are among this step's sorted ``vocab_ids``)."""
        vids = tokens["vocab_ids"]
        gmap = np.asarray([self.index[t] for t in vids.tolist()], dtype=np.int64)
        return gmap[np.searchsorted(vids, ids)] if len(ids) else ids.astype(np.int64)


def _sig(x: Any) -> float | None:
    """Four significant digits (the page shows three); None for NaN / inf."""
    x = float(x)
    return float(f"{x:.4g}") if math.isfinite(x) else None


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _tool_counts(row: dict[str, Any]) -> tuple[int, int]:
    calls = row.get("tool_calls") or []
    return len(calls), sum(1 for c in calls if isinstance(c, dict) and c.get("status") in TOOL_FAILURES)


def _accuracy(rows: list[dict[str, Any]]) -> float | None:
    """Mean of the scorer's ``acc`` when the rows carry it, else the share of rows with score > 0."""
    accs = [float(r["acc"]) for r in rows if isinstance(r.get("acc"), (int, float, bool))]
    if accs:
        return float(np.mean(accs))
    scores = [r["score"] for r in rows if isinstance(r.get("score"), (int, float))]
    return float(np.mean([s > 0 for s in scores])) if scores else None


def pack(steps: list[StepDump], title: str = "") -> tuple[dict[str, Any], list[str], str]:
    """The page's payload (module docstring): ``(meta, row chunks, text blob)``."""
    vocab = _Vocab()
    for sd in steps:
        if sd.tokens is not None:
            vocab.add(sd.tokens)
    out = _Packed(cols={k: [] for k in _COLUMNS}, id_dtype="<u2" if len(vocab.ids) <= 65536 else "<u4")
    for sd in steps:
        lengths = _pack_step(out, sd, vocab)
        _add_overview(out.overview, sd, lengths)
    meta = {
        "title": title,
        "n": len(out.chunks),
        "cols": out.cols,
        "sources": list(out.sources),
        "groups": [uid for _, uid in out.groups],
        "vocab": vocab.pieces,
        "vocabIds": vocab.ids,
        "idBytes": np.dtype(out.id_dtype).itemsize,
        "quantities": [k for k, bit in QUANTITIES.items() if out.present & bit],
        "steps": [sd.step for sd in steps],
        "overview": out.overview,
        "scales": _scales(steps),
        "hasTokens": any(sd.tokens is not None for sd in steps),
    }
    return meta, out.chunks, _b64z(json.dumps(out.texts, ensure_ascii=False).encode("utf-8"))


_COLUMNS = (
    "step",
    "group",
    "score",
    "len",
    "plen",
    "trunc",
    "calls",
    "toolErr",
    "turns",
    "src",
    "mis",
    "misMean",
    "adv",
    "ent",
    "pad",
    "snippet",
)


@dataclass
class _Packed:
    cols: dict[str, list[Any]]
    id_dtype: str
    sources: dict[str, int] = field(default_factory=dict)
    groups: dict[tuple[int, str], int] = field(default_factory=dict)
    chunks: list[str] = field(default_factory=list)
    texts: list[list[str]] = field(default_factory=list)
    present: int = 0
    overview: dict[str, Any] = field(
        default_factory=lambda: {
            k: [] for k in ("step", "reward", "length", "accuracy", "truncated", "toolCalls", "rows")
        }
    )


def _pack_step(out: _Packed, sd: StepDump, vocab: _Vocab) -> list[int]:
    """Append one step's rows to ``out``; returns their response lengths."""
    t = sd.tokens
    if t is not None:
        ids_p, ids_r = vocab.remap(t, t["prompt_ids"]), vocab.remap(t, t["response_ids"])
        quant = {
            "old_log_probs": t.get("old_log_probs"),
            "entropys": t.get("entropys"),
            "advantages": t.get("advantages"),
            "gap": (t["rollout_log_probs"] - t["old_log_probs"])
            if "rollout_log_probs" in t and "old_log_probs" in t
            else None,
        }
    cols, lengths = out.cols, []
    for i, row in enumerate(sd.rows):
        _add_summary(cols, row, sd.step, out.sources, out.groups)
        out.texts.append([str(row.get("input", "")), str(row.get("output", ""))])
        js = json.dumps({k: v for k, v in row.items() if k not in TEXT_FIELDS}, ensure_ascii=False, default=str).encode(
            "utf-8"
        )
        if t is None:  # a text-only dump: lengths as written, else in characters
            cols["len"][-1] = row.get("response_length", len(str(row.get("output", ""))))
            for key in ("mis", "misMean", "adv", "ent"):
                cols[key].append(None)
            out.chunks.append(_b64z(np.array([len(js), 0, 0, 0], "<u4").tobytes() + js))
            lengths.append(cols["len"][-1])
            continue
        p0, p1 = t["prompt_offsets"][i], t["prompt_offsets"][i + 1]
        r0, r1 = t["response_offsets"][i], t["response_offsets"][i + 1]
        flags, parts = 0, []
        for name, bit in QUANTITIES.items():
            if quant[name] is not None:
                flags |= bit
                parts.append(_planes(_f16(quant[name][r0:r1])))
        cols["len"][-1], cols["plen"][-1], cols["pad"][-1] = int(r1 - r0), int(p1 - p0), int(t["response_pad"][i])
        _add_token_summary(cols, quant, r0, r1, t["response_mask"][r0:r1].astype(bool))
        head = np.array([len(js), p1 - p0, r1 - r0, flags], "<u4").tobytes()
        ids = np.concatenate([ids_p[p0:p1], ids_r[r0:r1]]).astype(out.id_dtype)
        out.chunks.append(
            _b64z(head + _planes(ids) + t["response_mask"][r0:r1].astype(np.uint8).tobytes() + b"".join(parts) + js)
        )
        out.present |= flags
        lengths.append(int(r1 - r0))
    return lengths


def _add_summary(
    cols: dict[str, list[Any]],
    row: dict[str, Any],
    step: int,
    sources: dict[str, int],
    groups: dict[tuple[int, str], int],
) -> None:
    calls, errors = _tool_counts(row)
    score = row.get("score")
    cols["step"].append(step)
    key = (step, str(row.get("uid", "")))  # a uid names a group within its step
    cols["group"].append(groups.setdefault(key, len(groups)))
    cols["score"].append(_finite_or_none(float(score)) if isinstance(score, (int, float)) else None)
    cols["len"].append(0)
    cols["plen"].append(row.get("prompt_length"))
    cols["pad"].append(0)
    cols["trunc"].append(1 if row.get("truncated") else 0)
    cols["calls"].append(calls)
    cols["toolErr"].append(errors)
    cols["turns"].append(row.get("num_turns", 1))
    cols["src"].append(sources.setdefault(str(row.get("data_source")), len(sources)))
    cols["snippet"].append(str(row.get("output", ""))[:SNIPPET_CHARS])


def _add_token_summary(
    cols: dict[str, list[Any]], quant: dict[str, np.ndarray | None], r0: int, r1: int, mask: np.ndarray
) -> None:
    def masked(name: str) -> np.ndarray | None:
        q = quant[name]
        return None if q is None or not mask.any() else q[r0:r1][mask]

    gap, adv, ent = masked("gap"), masked("advantages"), masked("entropys")
    cols["mis"].append(None if gap is None else _sig(np.abs(gap).max()))
    cols["misMean"].append(None if gap is None else _sig(np.abs(gap).mean()))
    cols["adv"].append(None if adv is None else _sig(adv.mean()))
    cols["ent"].append(None if ent is None else _sig(ent.mean()))


def _add_overview(ov: dict[str, Any], sd: StepDump, lengths: list[int]) -> None:
    scores = [r["score"] for r in sd.rows if isinstance(r.get("score"), (int, float))]
    calls = [_tool_counts(r)[0] for r in sd.rows]
    ov["step"].append(sd.step)
    ov["rows"].append(len(sd.rows))
    ov["reward"].append(float(np.mean(scores)) if scores else None)
    ov["length"].append(float(np.mean(lengths)) if lengths else None)
    ov["accuracy"].append(_accuracy(sd.rows))
    if any(isinstance(r.get("acc"), (int, float, bool)) for r in sd.rows):
        ov["accuracyFrom"] = "acc"
    ov["truncated"].append(float(np.mean([bool(r.get("truncated")) for r in sd.rows])) if sd.rows else None)
    ov["toolCalls"].append(float(np.mean(calls)) if calls else None)


def _scales(steps: list[StepDump]) -> dict[str, float]:
    """Colour-scale ends: the 99th percentile of |value| over trained tokens of the whole dump."""
    out: dict[str, float] = {}
    for name, key in (("advantages", "advantages"), ("entropys", "entropys"), ("old_log_probs", "old_log_probs")):
        vals = [
            np.abs(sd.tokens[key][sd.tokens["response_mask"].astype(bool)])
            for sd in steps
            if sd.tokens is not None and key in sd.tokens
        ]
        vals = [v for v in vals if len(v)]
        out[name] = float(np.percentile(np.concatenate(vals), 99)) if vals else 1.0
    gaps = [
        np.abs(sd.tokens["rollout_log_probs"] - sd.tokens["old_log_probs"])[sd.tokens["response_mask"].astype(bool)]
        for sd in steps
        if sd.tokens is not None and "rollout_log_probs" in sd.tokens and "old_log_probs" in sd.tokens
    ]
    gaps = [g for g in gaps if len(g)]
    out["gap"] = float(np.percentile(np.concatenate(gaps), 99)) if gaps else 1.0
    return {k: (v if v > 0 and math.isfinite(v) else 1.0) for k, v in out.items()}
