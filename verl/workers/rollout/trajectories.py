"""Multi-turn rollout metrics and the per-step trajectory dump (``trainer.rollout_data_dir``).

Both read the non-tensors the agent loops attach to a generated batch (``num_turns``,
``tool_calls``, ``messages``, ``tool_rewards``, ``turn_scores``; see
`verl.workers.rollout.agent_loop.manager`); a single-turn batch counts 1 turn and 0 calls.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from verl.protocol import DataProto
from verl.workers.rollout.agent_loop.drift import drift_metrics

__all__ = ["agent_loop_metrics", "dump_trajectories"]


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {f"{prefix}/min": float(arr.min()), f"{prefix}/max": float(arr.max()), f"{prefix}/mean": float(arr.mean())}


def agent_loop_metrics(batch: DataProto) -> dict[str, float]:
    """``num_turns/{min,max,mean}``, ``tool_call_counts/{min,max,mean}`` (per trajectory) and the
    batch's ``multiturn/{tool_errors,tool_timeouts,malformed_tool_calls,tokenization_mismatch,aborted,failed}``
    counts (computed on the whole batch, so they are exact with several data-parallel workers), and
    the token-drift monitor's ``multi_turn/drift_rate`` / ``multi_turn/drift_first_offset``
    (`verl.workers.rollout.agent_loop.drift.drift_metrics`).

    Returns:
        {} when the batch carries no agent-loop non-tensors.
    """
    ntb = batch.non_tensor_batch
    if "num_turns" not in ntb or len(batch) == 0:
        return {}
    calls = list(ntb.get("tool_calls", [[] for _ in range(len(batch))]))
    statuses = [c.get("status") for row in calls for c in (row or [])]
    out = {**_stats("num_turns", [float(t) for t in ntb["num_turns"]]),
           **_stats("tool_call_counts", [float(len(row or [])) for row in calls])}
    out["multiturn/tool_errors"] = float(statuses.count("error"))
    out["multiturn/tool_timeouts"] = float(statuses.count("timeout"))
    out["multiturn/malformed_tool_calls"] = float(statuses.count("malformed"))
    for key in ("tokenization_mismatch", "aborted", "failed"):  # trajectories flagged by the agent loops
        if key in ntb:
            out[f"multiturn/{key}"] = float(np.sum(np.asarray(ntb[key], dtype=np.float64)))
    out.update(drift_metrics(ntb))  # multi_turn/drift_rate, multi_turn/drift_first_offset
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    return value


def dump_trajectories(batch: DataProto, tokenizer: Any, out_dir: str | Path, step: int,
                      extra: dict[str, Any] | None = None) -> Path:
    """Write ``<out_dir>/<step>.jsonl``: one line per trajectory of the scored batch.

    verl's fields: ``input`` (prompt text), ``output`` (every response token after the prompt,
    tool and user turns included), ``gts`` (ground truth), ``score`` (sum of
    ``token_level_scores``), ``step``; then ``uid``, ``data_source``, ``num_turns`` and, for
    agent-loop batches, ``tool_calls`` (name, arguments, status), ``messages`` (the conversation),
    ``tool_rewards`` and ``turn_scores``.

    Args:
        extra: more per-row fields, each a sequence of length ``len(batch)`` written under its
            key (as verl writes the reward's extra infos); other lengths are skipped.

    Returns:
        The file written.
    """
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    b, ntb = batch.batch, batch.non_tensor_batch
    scores = b["token_level_scores"].sum(-1).tolist() if "token_level_scores" in b.keys() else [None] * len(batch)
    width = b["prompts"].shape[1]
    file = path / f"{step}.jsonl"
    with file.open("w") as f:
        for i in range(len(batch)):
            prompt = b["prompts"][i][b["attention_mask"][i, :width].bool()].tolist()
            response = b["responses"][i][b["attention_mask"][i, width:].bool()].tolist()
            rm = ntb["reward_model"][i] if "reward_model" in ntb else None
            row = {
                "input": tokenizer.decode(prompt, skip_special_tokens=True),
                "output": tokenizer.decode(response, skip_special_tokens=True),
                "gts": _jsonable(rm.get("ground_truth")) if isinstance(rm, dict) else None,
                "score": scores[i],
                "step": step,
                "uid": _jsonable(ntb["uid"][i]) if "uid" in ntb else i,
                "data_source": _jsonable(ntb["data_source"][i]) if "data_source" in ntb else None,
                "num_turns": int(ntb["num_turns"][i]) if "num_turns" in ntb else 1,
            }
            for key in ("tool_calls", "messages", "tool_rewards", "turn_scores"):
                if key in ntb:
                    row[key] = _jsonable(ntb[key][i])
            for key, values in (extra or {}).items():
                if len(values) == len(batch):
                    row[key] = _jsonable(values[i])
            f.write(json.dumps(row, default=str, ensure_ascii=False) + "\n")
    return file
