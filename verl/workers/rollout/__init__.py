"""Rollout engines behind one `RolloutEngine` protocol, chosen by ``actor_rollout_ref.rollout.name``.

``hf`` (built in, CPU/GPU) generates with the actor's own transformers model; ``vllm`` and
``sglang`` are optional extras. Build one with `build_rollout_engine(module, rollout_config,
tokenizer)`.
"""

from __future__ import annotations

from verl.workers.rollout.base import ROLLOUT_ENGINES, RolloutEngine, build_rollout_engine
from verl.workers.rollout.hf_rollout import HFRollout
from verl.workers.rollout.sampling import SamplingParams, resolve_sampling, sample_tokens, top_k_top_p_filter

__all__ = [
    "HFRollout",
    "ROLLOUT_ENGINES",
    "RolloutEngine",
    "SamplingParams",
    "build_rollout_engine",
    "resolve_sampling",
    "sample_tokens",
    "top_k_top_p_filter",
]
