"""Writing generations: ``trainer.rollout_data_dir`` (training), ``trainer.validation_data_dir``
(validation) and ``trainer.log_val_generations`` (verl's names and file layout).

Both dumps are ``<dir>/<step>.jsonl``, one JSON object per trajectory; the rows of both come from
one function (`generation_rows`) and one writer (`dump_generations`) writes them, so a trajectory
gives the same keys and the same texts in a training and in a validation dump. A row holds:

- ``input``: the prompt text (prompt tokens with ``attention_mask == 1``);
- ``output``: the response text: every response token with ``attention_mask == 1``, tool and
  user turns of a multi-turn trajectory included (verl's rule for its rollout dump). For such a
  row this is more than the reward function scored: the reward managers decode only the
  ``response_mask == 1`` tokens (`verl.reward.manager_steps.gather_inputs`). The dump keeps the
  whole conversation the model continued; the token-level file below keeps ``response_mask``.
  Both texts are decoded with ``skip_special_tokens=True``;
- ``gts`` (``reward_model["ground_truth"]``, None when absent), ``score`` (the sequence score:
  the sum of ``token_level_scores`` in training, of the validation reward tensor in validation),
  ``step`` (the file's step);
- ``uid`` (the row index when absent), ``data_source`` (None when absent), ``num_turns`` (1 for a
  single-turn batch) and, for agent-loop batches, ``tool_calls`` (name, arguments, status),
  ``messages`` (the conversation), ``tool_rewards`` and ``turn_scores``;
- ``prompt_length``, ``response_length`` (valid tokens), ``truncated`` (the response filled
  ``max_response_length``, verl's clip-ratio test) and ``policy_version`` (the number of optimizer
  steps before the generation; with verl's async keys ``min_global_steps`` / ``max_global_steps``
  in the batch those are written instead);
- every per-sample value the reward manager reported (``acc``, ``pred``, ...), under its name.

A training dump is named by the global step that trained on the batch (1-based, ``policy_version``
one less); a validation dump by the global step it is logged at (0 = before training, which is
also its ``policy_version``). Values go through one conversion to JSON types (`_jsonable`).

Training dumps (`dump_rollout_data`) also write, beside the JSONL, ``<dir>/<global_step>.tokens.npz``
(`TOKEN_ARRAYS`), the token-level view of the same rows in the same order, read by ``verl view``;
``trainer.rollout_data_max_rows`` bounds both files (`select_dump_rows`). ``verl view`` and
``verl reward test --dump`` read either kind of directory (a validation dump is text-only).

``log_val_generations = N`` logs N validation samples per validation: the samples are sorted
by input, shuffled with ``RandomState(42)`` (the same N prompts every time, as in verl) and the
first N are printed and appended to ``<trainer.output_dir>/val_generations.jsonl``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "TOKEN_ARRAYS",
    "dump_generations",
    "dump_rollout_data",
    "generation_rows",
    "pick_val_generations",
    "select_dump_rows",
]

logger = logging.getLogger(__name__)

AGENT_LOOP_KEYS = ("tool_calls", "messages", "tool_rewards", "turn_scores")
"""Non-tensors the agent loops attach to a batch (`verl.workers.rollout.agent_loop.manager`), copied per row."""


def _jsonable(value: Any) -> Any:
    """``value`` as JSON types: arrays and tensors as (nested) lists, numpy scalars as Python
    scalars, dicts (keys as strings), lists and tuples element-wise; any other object as ``str``."""
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def generation_rows(
    batch: Any,
    tokenizer: Any,
    step: int,
    *,
    scores: Sequence[float] | torch.Tensor | None = None,
    extra: dict[str, Sequence[Any]] | None = None,
    policy_version: int | None = None,
) -> list[dict[str, Any]]:
    """The dump rows of a generated batch (module docstring), in batch order.

    Args:
        batch: a `DataProto` with ``prompts`` `(B, P)`, ``responses`` `(B, R)` and
            ``attention_mask`` `(B, P+R)`; non-tensors ``uid``, ``data_source``, ``reward_model``,
            ``num_turns``, the agent-loop keys and verl's async ``min_global_steps`` /
            ``max_global_steps`` are used when present.
        tokenizer: has ``batch_decode(list[list[int]], skip_special_tokens=True)``.
        step: written as ``step``.
        scores: `(B,)` sequence scores; None = the sum of ``token_level_scores`` over the response
            when the batch has them, else null.
        extra: more per-row fields, each a sequence of length ``B`` written under its key (after
            the fields above; a key already set is replaced); other lengths are skipped.
        policy_version: optimizer steps applied before the generation; None and no async keys =
            no such field.

    Returns:
        ``B`` dicts of JSON types.
    """
    b, ntb, n = batch.batch, batch.non_tensor_batch, len(batch)
    width, max_response = b["prompts"].shape[1], b["responses"].shape[1]
    pmask, rmask = b["attention_mask"][:, :width].bool(), b["attention_mask"][:, width:].bool()
    prompts = [b["prompts"][i][pmask[i]].tolist() for i in range(n)]
    responses = [b["responses"][i][rmask[i]].tolist() for i in range(n)]
    inputs = tokenizer.batch_decode(prompts, skip_special_tokens=True) if n else []
    outputs = tokenizer.batch_decode(responses, skip_special_tokens=True) if n else []
    if scores is None:
        scores = b["token_level_scores"].sum(-1) if "token_level_scores" in b.keys() else [None] * n
    scores = _jsonable(scores)
    if len(scores) != n:
        raise ValueError(f"generation_rows: {len(scores)} scores for a batch of {n} rows")
    rows = []
    for i in range(n):
        rm = ntb["reward_model"][i] if "reward_model" in ntb else None
        row: dict[str, Any] = {
            "input": inputs[i],
            "output": outputs[i],
            "gts": _jsonable(rm.get("ground_truth")) if isinstance(rm, dict) else None,
            "score": None if scores[i] is None else float(scores[i]),
            "step": step,
            "uid": _jsonable(ntb["uid"][i]) if "uid" in ntb else i,
            "data_source": _jsonable(ntb["data_source"][i]) if "data_source" in ntb else None,
            "num_turns": int(ntb["num_turns"][i]) if "num_turns" in ntb else 1,
        }
        for key in AGENT_LOOP_KEYS:
            if key in ntb:
                row[key] = _jsonable(ntb[key][i])
        row.update(
            prompt_length=len(prompts[i]),
            response_length=len(responses[i]),
            truncated=len(responses[i]) >= max_response,
        )
        if "min_global_steps" in ntb:  # verl's async trainers: the policy versions a trajectory spans
            row["min_global_steps"] = _jsonable(ntb["min_global_steps"][i])
            row["max_global_steps"] = _jsonable(ntb.get("max_global_steps", ntb["min_global_steps"])[i])
        elif policy_version is not None:
            row["policy_version"] = policy_version
        for key, values in (extra or {}).items():
            if len(values) == n:
                row[key] = _jsonable(values[i])
        rows.append(row)
    return rows


def dump_generations(directory: str | Path, step: int, rows: Sequence[dict[str, Any]]) -> Path:
    """Write ``<directory>/<step>.jsonl``, one row (`generation_rows`) per line; returns its path."""
    out = Path(directory) / f"{step}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out


def pick_val_generations(
    inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float], n: int
) -> list[tuple[str, str, float]]:
    """N (input, output, score) samples: sorted by input, shuffled with RandomState(42), first N."""
    samples = sorted(zip(inputs, outputs, (float(s) for s in scores)), key=lambda x: x[0])
    order = np.arange(len(samples))
    np.random.RandomState(42).shuffle(order)
    return [samples[i] for i in order[:n]]


def log_val_generations(samples: list[tuple[str, str, float]], step: int, output_dir: str | Path) -> None:
    """Prints the samples and appends them to ``<output_dir>/val_generations.jsonl``."""
    path = Path(output_dir) / "val_generations.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for inp, outp, score in samples:
            f.write(json.dumps({"step": step, "input": inp, "output": outp, "score": score}, ensure_ascii=False) + "\n")
    for inp, outp, score in samples:
        print(f"[val generation step {step}] score={score:.3g}\n  input: {inp!r}\n  output: {outp!r}", flush=True)


TOKEN_ARRAYS: dict[str, str] = {
    "prompt_ids": "(sum P_i,) int32 valid prompt tokens of every row, concatenated",
    "prompt_offsets": "(B+1,) int64 row i's prompt tokens are prompt_ids[prompt_offsets[i]:prompt_offsets[i+1]]",
    "response_ids": "(sum R_i,) int32 valid response tokens (model, tool and user turns), concatenated",
    "response_offsets": "(B+1,) int64 row i's slice of every per-response-token array",
    "response_mask": "(sum R_i,) uint8 1 on tokens the loss trains on, 0 on tool / user turns",
    "response_pad": "(B,) int32 padding positions after the valid response (max_response_length - R_i)",
    "rollout_log_probs": "(sum R_i,) float32 log-prob of each token under the rollout engine (when it reports them)",
    "old_log_probs": "(sum R_i,) float32 log-prob under the training engine before the update",
    "entropys": "(sum R_i,) float32 entropy (nats) of the training policy at each position",
    "advantages": "(sum R_i,) float32 advantage of each token",
    "vocab_ids": "(V_d,) int32 the distinct token ids of the dump, sorted",
    "vocab_offsets": "(V_d+1,) int64 piece j is vocab_bytes[vocab_offsets[j]:vocab_offsets[j+1]] (UTF-8)",
    "vocab_bytes": "(sum,) uint8 the decoded text piece of every distinct token id",
}
"""Arrays of ``<step>.tokens.npz``; the four float arrays are present when the batch has them."""

_FLOAT_KEYS = ("rollout_log_probs", "old_log_probs", "entropys", "advantages")


def select_dump_rows(uids: Sequence[Any], max_rows: int | None) -> np.ndarray:
    """Rows to dump: whole groups (same ``uid``) in order of first appearance, at most ``max_rows``.

    Args:
        uids: `(B,)` group id of every row.
        max_rows: the bound (``trainer.rollout_data_max_rows``); None = every row. When the first
            group alone is larger, its first ``max_rows`` rows are kept.

    Returns:
        `(K,)` int64 row indices, grouped by uid, each group in batch order.
    """
    groups: dict[Any, list[int]] = {}
    for i, u in enumerate(uids):
        groups.setdefault(u, []).append(i)
    out: list[int] = []
    for rows in groups.values():
        if max_rows is not None and len(out) + len(rows) > max_rows:
            if not out:
                out = rows[:max_rows]
            break
        out.extend(rows)
    return np.asarray(out, dtype=np.int64)


def _pieces(tokenizer: Any, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 text piece of each id (``decode([id])``, special tokens kept) as (offsets, bytes)."""
    pieces = tokenizer.batch_decode([[int(i)] for i in ids], skip_special_tokens=False) if len(ids) else []
    blobs = [p.encode("utf-8", "replace") for p in pieces]
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    return offsets, np.frombuffer(b"".join(blobs), dtype=np.uint8)


def _ragged(rows: list[torch.Tensor], dtype: Any) -> np.ndarray:
    return np.concatenate([r.cpu().numpy().astype(dtype) for r in rows]) if rows else np.zeros(0, dtype)


def dump_rollout_data(
    batch: Any,
    tokenizer: Any,
    directory: str | Path,
    step: int,
    *,
    max_rows: int | None = None,
    entropys: torch.Tensor | None = None,
    score_keys: Sequence[str] = (),
    policy_version: int | None = None,
) -> tuple[Path, Path]:
    """Write ``<directory>/<step>.jsonl`` and ``<directory>/<step>.tokens.npz`` (module docstring).

    Args:
        batch: the step's trained `DataProto`: ``prompts`` `(B, P)`, ``responses`` /
            ``response_mask`` `(B, R)`, ``attention_mask`` `(B, P+R)`, and any of
            ``rollout_log_probs``, ``old_log_probs``, ``advantages`` `(B, R)`.
        tokenizer: decodes texts and token pieces.
        directory: ``trainer.rollout_data_dir``.
        step: the global step (1-based) that trained on this batch; names the files.
        max_rows: ``trainer.rollout_data_max_rows`` (`select_dump_rows`).
        entropys: `(B, R)` per-token entropy from the old-log-prob forward, when it ran.
        score_keys: per-sample reward values in ``non_tensor_batch`` (acc, pred, ...), written
            under their names, as verl writes the reward's extra infos.
        policy_version: optimizer steps applied before this rollout (``global_step - 1``).

    Returns:
        The JSONL and the NPZ paths.
    """
    uids = batch.non_tensor_batch["uid"] if "uid" in batch.non_tensor_batch else range(len(batch))
    keep = select_dump_rows(uids, max_rows)
    sub = batch[keep] if len(keep) < len(batch) else batch
    b, ntb = sub.batch, sub.non_tensor_batch
    extra = {k: ntb[k] for k in score_keys if k in ntb}
    rows = generation_rows(sub, tokenizer, step, extra=extra, policy_version=policy_version)
    jsonl = dump_generations(directory, step, rows)

    width = b["prompts"].shape[1]
    pmask, rmask = b["attention_mask"][:, :width].bool(), b["attention_mask"][:, width:].bool()
    prompts = [b["prompts"][i][pmask[i]] for i in range(len(sub))]
    valid = [rmask[i] for i in range(len(sub))]
    responses = [b["responses"][i][valid[i]] for i in range(len(sub))]
    resp_len = np.asarray([len(r) for r in responses], dtype=np.int64)

    arrays: dict[str, np.ndarray] = {
        "prompt_ids": _ragged(prompts, np.int32),
        "response_ids": _ragged(responses, np.int32),
        "prompt_offsets": np.concatenate([[0], np.cumsum([len(p) for p in prompts])]).astype(np.int64),
        "response_offsets": np.concatenate([[0], np.cumsum(resp_len)]).astype(np.int64),
        "response_pad": (b["responses"].shape[1] - resp_len).astype(np.int32),
        "response_mask": _ragged([b["response_mask"][i][valid[i]] for i in range(len(sub))], np.uint8),
    }
    per_token = {k: b[k] for k in _FLOAT_KEYS if k in b.keys()}
    if entropys is not None:
        per_token["entropys"] = entropys[torch.as_tensor(keep)] if len(keep) < len(batch) else entropys
    for key, value in per_token.items():
        arrays[key] = _ragged([value[i][valid[i]].float() for i in range(len(sub))], np.float32)
    vocab = np.unique(np.concatenate([arrays["prompt_ids"], arrays["response_ids"]]))
    arrays["vocab_ids"] = vocab.astype(np.int32)
    arrays["vocab_offsets"], arrays["vocab_bytes"] = _pieces(tokenizer, vocab)
    npz = Path(directory) / f"{step}.tokens.npz"
    np.savez_compressed(npz, **arrays)
    return jsonl, npz
