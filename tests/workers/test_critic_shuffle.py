"""``critic.shuffle``: the critic's mini-batches come from a seeded permutation of the step's
trajectories each epoch (as the actor's); without it they keep the input order."""

from __future__ import annotations

import torch

from verl.config.schema import CriticConfig
from verl.engine.base import StepResult
from verl.protocol import DataProto
from verl.workers.critic import PPOCritic


class _RecordingEngine:
    """Records the rows of every mini-batch handed to ``train_batch`` (no model)."""

    def __init__(self) -> None:
        self.minis: list[list[int]] = []

    def train_batch(self, mini: DataProto, loss_fn, micro, mask_key: str = "response_mask") -> StepResult:
        self.minis.append(mini.batch["row"].tolist())
        return StepResult(metrics={}, grad_norm=0.0, stepped=True)

    def lr_scheduler_step(self) -> float:
        return 0.0


def _minis(shuffle: bool, epochs: int = 2) -> list[list[int]]:
    engine = _RecordingEngine()
    cfg = CriticConfig(shuffle=shuffle, ppo_epochs=epochs)
    data = DataProto.from_dict(tensors={"row": torch.arange(8)})
    PPOCritic(engine, cfg).update_critic(data, mini_batch_size=4)  # type: ignore[arg-type]
    return engine.minis


def test_critic_shuffle_permutes_mini_batches_each_epoch() -> None:
    assert _minis(shuffle=False) == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2
    shuffled = _minis(shuffle=True)
    assert len(shuffled) == 4 and all(len(m) == 4 for m in shuffled)
    for epoch in (shuffled[:2], shuffled[2:]):
        assert sorted(epoch[0] + epoch[1]) == list(range(8))  # every trajectory once per epoch
    assert shuffled[:2] != [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert shuffled[:2] != shuffled[2:]  # a fresh permutation per epoch
    assert _minis(shuffle=True) == shuffled  # seeded: the same order every run
