"""Token-drift monitor: do the ids a multi-turn trajectory trains on match the chat template's rendering?

Agent loops build a trajectory's ids turn by turn and keep what the model sampled
(`verl.workers.rollout.agent_loop.chat`); the template, asked to render the final conversation,
may produce other ids: it strips the ``<think>`` blocks of earlier assistant turns, re-renders
tool calls, or the model sampled a non-canonical tokenization of its own text. Training on ids a
deployed model (which sees the rendering) never sees is silent drift.

Each generated batch, `mark_drift` re-renders the final conversation of up to ``samples``
trajectories (evenly spaced over the batch's ``tool_agent`` rows that finished: not failed,
not aborted) with the template the loop used (its tools and template keywords) and compares
with the ids actually in the batch (prompt + response under ``attention_mask``): a trajectory
drifts when its ids are not a prefix of the rendering (the rendering may add the closing of the
last assistant turn). It adds per-row non-tensors ``token_drift`` (-1 not checked, 0 matches,
1 drifts) and ``token_drift_offset`` (the first differing position in the trajectory's ids, -1
when none); `drift_metrics` turns them into ``multi_turn/drift_rate`` (drifting / checked) and
``multi_turn/drift_first_offset`` (the earliest first differing position among drifting rows,
-1 when none drifts).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from verl.protocol import DataProto
from verl.workers.rollout.agent_loop.chat import ChatTemplate, first_difference

__all__ = ["drift_metrics", "drift_offset", "mark_drift", "sample_rows"]


def drift_offset(chat: ChatTemplate, ids: list[int], messages: list[dict[str, Any]]) -> int | None:
    """First position where ``ids`` leave the template's rendering of ``messages``; None when they
    are a prefix of it (the generation prompt is added when the last turn is not the assistant's)."""
    rendered = chat.encode(chat.render(messages, messages[-1]["role"] != "assistant"))
    pos = first_difference(list(ids), rendered)
    return None if pos >= len(ids) else pos


def sample_rows(candidates: list[int], samples: int) -> list[int]:
    """Up to ``samples`` of ``candidates``, evenly spaced (first and last included; no RNG)."""
    if samples <= 0 or not candidates:
        return []
    if len(candidates) <= samples:
        return list(candidates)
    picks = np.linspace(0, len(candidates) - 1, samples).round().astype(int)
    return [candidates[i] for i in sorted(set(picks.tolist()))]


def mark_drift(batch: DataProto, agent_names: list[str], chat: ChatTemplate, samples: int) -> None:
    """Add ``token_drift`` / ``token_drift_offset`` `(B,)` to ``batch.non_tensor_batch`` (module docstring).

    Args:
        batch: an assembled agent-loop batch (``input_ids``, ``attention_mask``, ``messages``).
        agent_names: each row's agent loop; only ``tool_agent`` rows are checked.
        chat: the template the loop rendered with (same tools and keywords).
        samples: trajectories checked per batch (0 = none; the keys are still added, all -1).
    """
    ntb = batch.non_tensor_batch
    n = len(batch)
    flags, offsets = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    done = [
        i
        for i in range(n)
        if agent_names[i] == "tool_agent"
        and ntb["messages"][i]
        and not int(ntb.get("failed", np.zeros(n))[i])
        and not int(ntb.get("aborted", np.zeros(n))[i])
    ]
    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"]
    for i in sample_rows(done, samples):
        pos = drift_offset(chat, ids[i][mask[i].bool()].tolist(), list(ntb["messages"][i]))
        flags[i] = int(pos is not None)
        offsets[i] = -1 if pos is None else pos
    ntb["token_drift"], ntb["token_drift_offset"] = flags, offsets


def drift_metrics(non_tensors: dict[str, Any]) -> dict[str, float]:
    """``multi_turn/drift_rate`` and ``multi_turn/drift_first_offset`` of a batch ({} when no row was checked)."""
    if "token_drift" not in non_tensors:
        return {}
    flags = np.asarray(non_tensors["token_drift"], dtype=np.int64)
    checked = flags >= 0
    if not checked.any():
        return {}
    offsets = np.asarray(non_tensors["token_drift_offset"], dtype=np.int64)[flags == 1]
    return {
        "multi_turn/drift_rate": float(flags[checked].mean()),
        "multi_turn/drift_first_offset": float(offsets.min()) if offsets.size else -1.0,
    }
