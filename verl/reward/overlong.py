"""DAPO overlong reward shaping ("soft overlong punishment").

For a response of L valid tokens, with ``expected_len = max_response_length - buffer_len``::

    penalty(L) = min(-(L - expected_len) / buffer_len * penalty_factor, 0)

so responses up to ``expected_len`` are untouched and the penalty grows linearly to
``-penalty_factor`` at ``max_response_length``. It depends on the response length only, never on
the prompt length. Example: max 20, buffer 4, factor 1 gives 16 -> 0, 17 -> -0.25,
18 -> -0.5, 20 -> -1.0.

Reference: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", 2025,
eq. 13 (https://arxiv.org/abs/2503.14476).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from verl.config.consistency import check_overlong_buffer


@dataclass(frozen=True)
class OverlongBufferConfig:
    """Settings of the DAPO overlong penalty (verl's ``reward_model.overlong_buffer``).

    Attributes:
        enable: Apply the penalty. When False nothing else is read or validated.
        len: Buffer length in tokens: the last ``len`` tokens before
            ``max_response_length`` are penalised linearly. Must be in
            ``[1, max_response_length]`` when enabled.
        penalty_factor: Penalty at exactly ``max_response_length`` tokens (a positive number;
            the penalty added to the reward is ``-penalty_factor`` there).
    """

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0

    @classmethod
    def from_config(cls, section: Any) -> OverlongBufferConfig:
        """The settings of a config section: ``reward_model.overlong_buffer`` (an object with these
        attributes) or verl's ``reward_kwargs.overlong_buffer_cfg`` (a mapping); absent fields take
        their defaults, other fields (``log``) are not read.

        Raises:
            ValueError, TypeError: ``len`` / ``penalty_factor`` that are not numbers.
        """
        if isinstance(section, cls):
            return section
        get = section.get if isinstance(section, Mapping) else lambda name, default: getattr(section, name, default)
        values = {f.name: get(f.name, f.default) for f in fields(cls)}
        return cls(
            enable=bool(values["enable"]), len=int(values["len"]), penalty_factor=float(values["penalty_factor"])
        )

    def validate(self, max_response_length: int | None) -> None:
        """Checks the settings against the response budget; a no-op when disabled.

        Args:
            max_response_length: ``data.max_response_length`` in tokens.

        Raises:
            ValueError: If enabled with a missing ``max_response_length`` or a buffer length
                outside ``[1, max_response_length]``, or a negative ``penalty_factor``.
        """
        if self.enable:
            check_overlong_buffer(self.len, self.penalty_factor, max_response_length)


def overlong_penalty(
    response_lengths: torch.Tensor,
    max_response_length: int,
    buffer_len: int,
    penalty_factor: float = 1.0,
) -> torch.Tensor:
    """DAPO soft overlong penalty per response.

    ``penalty = min(-(L - (max_response_length - buffer_len)) / buffer_len * penalty_factor, 0)``

    Args:
        response_lengths: (B,) number of valid response tokens L (``response_mask.sum(-1)``).
        max_response_length: Response budget in tokens.
        buffer_len: Penalty window in tokens (> 0).
        penalty_factor: Penalty at ``L == max_response_length``.

    Returns:
        (B,) float32 penalties, each in ``[-penalty_factor, 0]`` for ``L <= max_response_length``.
    """
    expected_len = max_response_length - buffer_len
    excess = response_lengths.to(torch.float32) - expected_len
    return torch.clamp(-excess / buffer_len * penalty_factor, max=0.0)
