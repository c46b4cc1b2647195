"""Rollout engines behind one `RolloutEngine` protocol, chosen by ``actor_rollout_ref.rollout.name``.

``hf`` (built in, CPU/GPU) generates with the actor's own transformers model; ``vllm`` and
``sglang`` are optional extras. Build one with `build_rollout_engine(module, rollout_config,
tokenizer)`.

Under every engine sits the token-level request API (`request`: ids in, ids + log-probs +
finish reason out, awaited concurrently; `hf_server.HFTokenServer` serves it for ``hf``), and
on it the agent loops (`agent_loop`: ``single_turn_agent``, ``tool_agent``) that the worker
wraps every engine in (`agent_loop.wrap_rollout_engine`).
"""

from __future__ import annotations

from verl.workers.rollout.base import ROLLOUT_ENGINES, RolloutEngine, build_rollout_engine
from verl.workers.rollout.hf.hf_rollout import HFRollout
from verl.workers.rollout.hf.hf_server import HFTokenServer
from verl.workers.rollout.sampling import SamplingParams, resolve_sampling, sample_tokens, top_k_top_p_filter

__all__ = [
    "HFRollout",
    "HFTokenServer",
    "ROLLOUT_ENGINES",
    "RolloutEngine",
    "SamplingParams",
    "build_rollout_engine",
    "resolve_sampling",
    "sample_tokens",
    "top_k_top_p_filter",
]
