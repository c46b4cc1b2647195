"""verl's module path of the ``hf`` rollout engine (`verl.workers.rollout.hf.hf_rollout`)."""

from verl.workers.rollout.hf.hf_rollout import HFRollout

__all__ = ["HFRollout"]
