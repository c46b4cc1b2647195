"""verl's import path of the interaction base class (``verl.interactions.base.BaseInteraction``)."""

from __future__ import annotations

from verl.tools.base import BaseInteraction

__all__ = ["BaseInteraction"]
