"""The GSM8K user simulator (verl's ``Gsm8kInteraction`` behaviour, at verl's import path).

After each assistant turn it scores the latest assistant message with the GSM8K scorer in
flexible mode (the last number counts; 1.0 if correct else 0.0). Correct: it answers "Your
response is correct!" and ends the conversation (``should_terminate``). Wrong: it asks the
model to reflect and try again; the agent loop's ``max_user_turns`` bounds the retries. The
turn score is that 1.0 / 0.0.

Reference: verl ``verl/interactions/gsm8k_interaction.py``.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.reward.scorers import gsm8k
from verl.tools.base import BaseInteraction, check_config_keys

__all__ = ["CORRECT_MESSAGE", "Gsm8kInteraction", "RETRY_MESSAGE"]

CORRECT_MESSAGE = "Your response is correct!"
RETRY_MESSAGE = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction):
    """Tells the model whether its GSM8K answer is right and lets it retry when wrong.

    Args:
        config: only ``name`` (set by the loader).

    Raises:
        ValueError: an unknown config key.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        check_config_keys(config or {}, {"name"}, "Gsm8kInteraction")
        super().__init__(config)
        self._instances: dict[str, dict[str, Any]] = {}

    async def start_interaction(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs: Any
    ) -> str:
        """Starts a trajectory with the row's ``interaction_kwargs`` (``ground_truth`` is used)."""
        instance_id = instance_id or str(uuid.uuid4())
        self._instances[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict]:
        """Scores the last assistant message: ``(should_terminate, user text, turn score, {})``."""
        content = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "")
        self._instances[instance_id]["response"] = content if isinstance(content, str) else str(content)
        reward = await self.calculate_score(instance_id)
        self._instances[instance_id]["reward"] = reward
        if reward == 1.0:
            return True, CORRECT_MESSAGE, reward, {}
        return False, RETRY_MESSAGE, reward, {}

    async def calculate_score(self, instance_id: str, **kwargs: Any) -> float:
        """GSM8K score (flexible) of the latest assistant message."""
        state = self._instances[instance_id]
        if state["ground_truth"] is None:
            return 0.0
        return float(
            gsm8k.compute_score(
                state["response"], str(state["ground_truth"]), method="flexible", format_score=0.0, score=1.0
            )
        )

    async def finalize_interaction(self, instance_id: str, **kwargs: Any) -> None:
        """Drops the trajectory's state."""
        self._instances.pop(instance_id, None)
