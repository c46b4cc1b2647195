"""`write_checkpoint` / `restore_checkpoint` over already built parts: nothing is built on restore."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from verl.algorithms import FixedKLController
from verl.config import load_config
from verl.run.checkpoint import CheckpointManager
from verl.trainer.ppo.checkpoint import restore_checkpoint, write_checkpoint
from verl.trainer.ppo.state import TrainerParts, TrainerState


class FakeGroup:
    """A role group that writes / reads one file per checkpoint, and records the calls."""

    world_size = 1

    def __init__(self, value: float) -> None:
        self.value, self.calls = value, []

    def save_checkpoint(self, out_dir: str) -> None:
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "w.txt").write_text(str(self.value))
        self.calls.append(("save", Path(out_dir).name))

    def load_checkpoint(self, in_dir: str) -> None:
        self.value = float((Path(in_dir) / "w.txt").read_text())
        self.calls.append(("load", Path(in_dir).name))

    def shutdown(self) -> None:
        pass


class FakeLoader:
    def __init__(self, position: int) -> None:
        self.position = position

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


def _parts(root: Path, actor: float, critic: float, position: int, kl: float) -> TrainerParts:
    return TrainerParts(
        tokenizer=None,
        train_dataloader=FakeLoader(position),
        val_dataloader=None,
        reward_fn=None,
        val_reward_fn=None,
        actor_rollout_wg=FakeGroup(actor),
        critic_wg=FakeGroup(critic),
        kl_ctrl=FixedKLController(kl),
        checkpoints=CheckpointManager(root),
    )


def test_round_trip_restores_roles_state_loader_kl_and_rng(tmp_path):
    config = load_config(None, [])
    saved = _parts(tmp_path, 1.5, 2.5, position=7, kl=0.2)
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    path = write_checkpoint(saved, TrainerState(global_step=4, epoch=1), config)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    assert path.name == "global_step_4" and (path / "config.yaml").is_file()
    assert saved.actor_rollout_wg.calls == [("save", "actor")] and saved.critic_wg.calls == [("save", "critic")]

    fresh, state = _parts(tmp_path, 0.0, 0.0, position=0, kl=0.0), TrainerState()
    random.seed(99)
    assert restore_checkpoint(fresh, state, config.trainer)
    assert (state.global_step, state.epoch) == (4, 1)
    assert (fresh.actor_rollout_wg.value, fresh.critic_wg.value, fresh.train_dataloader.position) == (1.5, 2.5, 7)
    assert fresh.kl_ctrl.value == 0.2
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_nothing_to_resume_leaves_state_alone(tmp_path):
    config = load_config(None, [])
    parts, state = _parts(tmp_path, 1.0, 1.0, 0, 0.1), TrainerState(global_step=0)
    assert not restore_checkpoint(parts, state, config.trainer)
    assert state == TrainerState() and parts.actor_rollout_wg.calls == []
