"""Multi-turn rollout metrics of a generated batch (the dumps of such batches: `verl.trainer.ppo.dumps`).

`agent_loop_metrics` reads the non-tensors the agent loops attach to a generated batch (``num_turns``,
``tool_calls``, ``messages``, ``tool_rewards``, ``turn_scores``; see
`verl.workers.rollout.agent_loop.manager`); a single-turn batch counts 1 turn and 0 calls.
"""

from __future__ import annotations

import numpy as np

from verl.protocol import DataProto
from verl.workers.rollout.agent_loop.drift import drift_metrics

__all__ = ["agent_loop_metrics"]


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
    out = {
        **_stats("num_turns", [float(t) for t in ntb["num_turns"]]),
        **_stats("tool_call_counts", [float(len(row or [])) for row in calls]),
    }
    out["multiturn/tool_errors"] = float(statuses.count("error"))
    out["multiturn/tool_timeouts"] = float(statuses.count("timeout"))
    out["multiturn/malformed_tool_calls"] = float(statuses.count("malformed"))
    for key in ("tokenization_mismatch", "aborted", "failed"):  # trajectories flagged by the agent loops
        if key in ntb:
            out[f"multiturn/{key}"] = float(np.sum(np.asarray(ntb[key], dtype=np.float64)))
    out.update(drift_metrics(ntb))  # multi_turn/drift_rate, multi_turn/drift_first_offset
    return out
