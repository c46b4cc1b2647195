"""RL data: prompt datasets, the resumable `RLDataLoader`, and the batch collate function."""

from __future__ import annotations

from verl.data.loader import RLDataLoader, create_rl_dataset, create_rl_sampler
from verl.data.rl_dataset import RLHFDataset
from verl.protocol import collate_fn

__all__ = ["RLDataLoader", "RLHFDataset", "collate_fn", "create_rl_dataset", "create_rl_sampler"]
