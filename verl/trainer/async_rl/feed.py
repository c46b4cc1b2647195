"""Prompts for the asynchronous loop: dataloader rows with stable ids and seeds, and their checkpoint form.

The loop submits prompts ahead of training and refills evicted ones one at a time, so the feed
cuts each dataloader batch into single-prompt rows. A row keeps what the synchronous loop
would have given it: batch ``b`` (the b-th batch pulled, counted over the whole run) row ``i``
gets the uid ``"{b}-{i}"`` and the ``rollout.n`` sampling seeds that `RLTrainer._with_seeds`
derives for step ``b`` (``derive_seeds([trainer.seed, b, code("train")], B x n)``), so a run
that trains batch b at step b generates exactly the synchronous run's tokens.

Rows pulled but not yet trained are saved with the checkpoint (`rows_to_state`): tensors as
tensors, the other fields as JSON text (numpy values become lists / numbers), so the trainer
state still loads with ``weights_only=True``; on resume they are generated again, first.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.arrays import object_array
from verl.workers.rollout.layout import derive_seeds

__all__ = ["PromptFeed", "Row", "rows_from_state", "rows_to_state"]


def _purpose_code(purpose: str) -> int:
    # the same code as RLTrainer._with_seeds, so seeds equal the synchronous loop's
    return sum(map(ord, purpose)) * 131 + len(purpose)


@dataclass
class Row:
    """One prompt: ``data`` is a one-row `DataProto`; ``seeds`` `(n,)` int64; ``epoch`` when pulled."""

    uid: str
    data: DataProto
    seeds: torch.Tensor
    epoch: int


class PromptFeed:
    """Rows from the training dataloader, in its order, across epochs.

    Args:
        dataloader: the stateful `RLDataLoader` (its state is checkpointed by the trainer).
        seed: ``trainer.seed``.
        n: ``rollout.n``.
    """

    def __init__(self, dataloader: Any, seed: int, n: int) -> None:
        self.dataloader, self.seed, self.n = dataloader, seed, n
        self._it: Any = None
        self.batches_pulled = 0
        self.epoch = 0
        self.reservoir: deque[Row] = deque()

    def take(self, k: int) -> list[Row]:
        """The next ``k`` rows (resumed rows first, then the dataloader's)."""
        while len(self.reservoir) < k:
            self._pull()
        return [self.reservoir.popleft() for _ in range(k)]

    def _pull(self) -> None:
        if self._it is None:
            self._it = iter(self.dataloader)
        try:
            batch_dict = next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = iter(self.dataloader)
            batch_dict = next(self._it)
        data = DataProto.from_single_dict(batch_dict)
        b = self.batches_pulled
        self.batches_pulled += 1
        seeds = derive_seeds([self.seed, b, _purpose_code("train")], len(data) * self.n)
        for i in range(len(data)):
            self.reservoir.append(Row(f"{b}-{i}", data[i : i + 1], seeds[i * self.n : (i + 1) * self.n], self.epoch))

    def state(self, untrained: Iterable[Row]) -> dict[str, Any]:
        """Checkpoint form: counters and every row not trained yet (in flight, buffered or unsubmitted)."""
        return {
            "batches_pulled": self.batches_pulled,
            "epoch": self.epoch,
            "rows": rows_to_state([*untrained, *self.reservoir]),
        }

    def load(self, state: dict[str, Any]) -> None:
        """Inverse of `state`: the saved rows come out of `take` first."""
        self.batches_pulled, self.epoch = int(state["batches_pulled"]), int(state["epoch"])
        self.reservoir = deque(rows_from_state(state["rows"]))


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a prompt field of type {type(value).__name__} cannot be saved with an async checkpoint")


def rows_to_state(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Rows as tensors, ints and JSON strings (loadable with ``weights_only=True``)."""
    out = []
    for row in rows:
        tensors = {k: v.clone() for k, v in row.data.batch.items()} if row.data.batch is not None else {}
        objects = {k: v[0] for k, v in row.data.non_tensor_batch.items()}
        out.append(
            {
                "uid": row.uid,
                "epoch": row.epoch,
                "seeds": row.seeds.clone(),
                "tensors": tensors,
                "objects": json.dumps(objects, default=_plain),
            }
        )
    return out


def rows_from_state(state: list[dict[str, Any]]) -> list[Row]:
    """Inverse of `rows_to_state`."""
    rows = []
    for item in state:
        objects = json.loads(item["objects"])
        data: dict[str, Any] = dict(item["tensors"])
        for k, v in objects.items():
            data[k] = object_array([v])
        rows.append(Row(item["uid"], DataProto.from_single_dict(data), item["seeds"], int(item["epoch"])))
    return rows
