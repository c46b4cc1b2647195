"""verl's ``verl.workers.reward_manager`` import path, over `verl.reward.managers`.

verl user code imports unchanged::

    from verl.workers.reward_manager import register

    @register("my_manager")
    class MyRewardManager:
        def __init__(
            self, tokenizer, num_examine, compute_score=None, reward_fn_key="data_source", **reward_kwargs
        ): ...
        def __call__(self, data, return_dict=False):
            for i in range(len(data)):
                item = data[i]          # a DataProtoItem: .batch, .non_tensor_batch, .meta_info
                ...
            return {"reward_tensor": reward_tensor, "reward_extra_info": {...}} if return_dict else reward_tensor

and selects it with ``reward_model.reward_manager=my_manager`` (or ``reward_manager.name``). The
class is built with verl's constructor arguments: ``tokenizer``, ``num_examine`` (0 for
training, 1 for validation), ``compute_score`` (the custom reward function, or
`default_compute_score`), ``reward_fn_key`` and ``reward_model.reward_kwargs`` as keywords.
"""

from __future__ import annotations

from verl.reward.managers import REWARD_MANAGERS, BatchRewardManager, NaiveRewardManager
from verl.reward.verl_managers import AbstractRewardManager, get_reward_manager_cls, register

DAPORewardManager = REWARD_MANAGERS.get("dapo")
PrimeRewardManager = REWARD_MANAGERS.get("prime")

__all__ = [
    "AbstractRewardManager",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "get_reward_manager_cls",
    "register",
]
