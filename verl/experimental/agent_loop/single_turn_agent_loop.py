"""verl's ``verl.experimental.agent_loop.single_turn_agent_loop.SingleTurnAgentLoop``: the product's
``single_turn_agent``."""

from __future__ import annotations

from verl.workers.rollout.agent_loop.single_turn import SingleTurnAgentLoop

__all__ = ["SingleTurnAgentLoop"]
