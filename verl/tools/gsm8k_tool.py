"""The GSM8K answer-check tool (verl's ``Gsm8kTool`` behaviour, at verl's import path).

The model calls ``calc_gsm8k_reward(answer="72")``; the tool stores the answer (as ``"#### 72"``),
scores it with the GSM8K scorer in flexible mode (the last number counts; 1.0 correct, 0.0
otherwise) and answers ``Current parsed answer='72' reward=1.0``. The step reward is 0.0 when the
score went up, else -0.05 (a penalty for resubmitting without improving, as verl does);
``calc_reward`` returns the latest score.

Reference: verl ``verl/tools/gsm8k_tool.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.reward.scorers import gsm8k
from verl.tools.base import BaseTool, ToolResponse, check_config_keys

__all__ = ["Gsm8kTool"]

NON_IMPROVING_PENALTY = -0.05
# step reward for an answer whose score is not above the previous one of the trajectory

DEFAULT_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "calc_gsm8k_reward",
        "description": "A tool for calculating the reward of gsm8k. "
        "(1.0 if your answer is correct, 0.0 if your answer is incorrect)",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {
                    "type": "string",
                    "description": "The model's answer to the GSM8K math problem, must be a digits",
                }
            },
            "required": ["answer"],
        },
    },
}


class Gsm8kTool(BaseTool):
    """Checks a GSM8K answer against the trajectory's ground truth.

    Args:
        config: no keys besides ``type: native``.
        tool_schema: OpenAI function schema; default :data:`DEFAULT_SCHEMA` (``calc_gsm8k_reward``).

    Raises:
        ValueError: an unknown config key.
    """

    def __init__(self, config: dict[str, Any], tool_schema: dict[str, Any] | None = None) -> None:
        check_config_keys(config or {}, set(), "Gsm8kTool")
        super().__init__(config, tool_schema or DEFAULT_SCHEMA)
        self._instances: dict[str, dict[str, Any]] = {}

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        """Starts a trajectory; ``ground_truth`` directly or in ``create_kwargs={"ground_truth": ...}``."""
        instance_id = instance_id or str(uuid.uuid4())
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._instances[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Stores ``parameters["answer"]``, scores it; returns feedback, step reward, metrics."""
        state = self._instances[instance_id]
        answer = parameters.get("answer", "")
        answer = answer if isinstance(answer, str) else str(answer)
        state["response"] = answer if answer.startswith("#### ") else "#### " + answer
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NON_IMPROVING_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed answer={answer!r} reward={reward!r}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The GSM8K score of the latest answer (flexible: the last number; 1.0 or 0.0)."""
        state = self._instances[instance_id]
        if state["ground_truth"] is None:
            return 0.0
        return float(
            gsm8k.compute_score(
                state["response"], str(state["ground_truth"]), method="flexible", format_score=0.0, score=1.0
            )
        )

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Drops the trajectory's state."""
        self._instances.pop(instance_id, None)
