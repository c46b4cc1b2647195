"""Interactions (user simulators) for multi-turn rollouts, at verl's import paths.

* ``load_interactions(interaction_config_path) -> dict[str, BaseInteraction]`` (verl's YAML).
* ``select_interaction(interactions, interaction_kwargs) -> BaseInteraction`` — by the row's
  ``extra_info.interaction_kwargs.name``.
* Built-in: ``Gsm8kInteraction`` (``verl.interactions.gsm8k_interaction.Gsm8kInteraction``).
"""

from __future__ import annotations

from verl.interactions.base import BaseInteraction
from verl.interactions.gsm8k_interaction import Gsm8kInteraction
from verl.interactions.registry import load_interactions, select_interaction

__all__ = ["BaseInteraction", "Gsm8kInteraction", "load_interactions", "select_interaction"]
