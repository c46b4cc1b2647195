"""An RL run's checkpoint: every role's engine state, the trainer state and the resolved config.

`write_checkpoint` / `restore_checkpoint` save and restore a whole run from its already built
`TrainerParts` and its `TrainerState`: each role's engine state (``actor/``, ``critic/``),
``trainer_state.pt`` (step, epoch, data-loader position, KL controller, RNG states) and the
resolved ``config.yaml``, inside the crash-safe directories of `verl.run.checkpoint`. Restoring
never builds anything.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from verl.run.checkpoint import CheckpointError, capture_rng_state, restore_rng_state, save_export_files, step_of
from verl.trainer.ppo.state import TrainerParts, TrainerState
from verl.utils.safe_load import safe_torch_load

if TYPE_CHECKING:
    from verl.config.schema import RootConfig, TrainerConfig


def write_checkpoint(
    parts: TrainerParts,
    state: TrainerState,
    config: RootConfig,
    export_hf: Callable[[Path, Path], object] | None = None,
) -> Path:
    """Save every role, the trainer state and the config as ``global_step_<N>`` (atomic).

    Args:
        parts: the run's built parts (role groups, data loader, KL controller, checkpoints).
        state: step and epoch to record.
        config: the resolved root config (saved next to the weights).
        export_hf: ``export_hf(checkpoint_dir, out_dir)`` writing a Hugging Face directory into
            ``<checkpoint>/huggingface`` (``trainer.save_hf``), or None.
    """
    from verl.config import save_config

    def write(tmp: Path) -> None:
        parts.actor_rollout_wg.save_checkpoint(str(tmp / "actor"))
        save_export_files(config.actor_rollout_ref.model, parts.tokenizer, tmp / "actor")  # for `verl merge`
        if parts.critic_wg is not None:
            parts.critic_wg.save_checkpoint(str(tmp / "critic"))
            critic_model = dataclasses.replace(
                config.critic.model, path=config.critic.model.path or config.actor_rollout_ref.model.path
            )
            save_export_files(critic_model, parts.tokenizer, tmp / "critic")
        trainer_state = {
            "global_step": state.global_step,
            "epoch": state.epoch,
            "dataloader": parts.train_dataloader.state_dict(),
            "kl_ctrl": parts.kl_ctrl.state_dict() if parts.kl_ctrl is not None else None,
            "rng": capture_rng_state(),
            "extra": state.extra,
        }
        torch.save(trainer_state, tmp / "trainer_state.pt")
        save_config(config, tmp / "config.yaml")
        if export_hf is not None:
            export_hf(tmp, tmp / "huggingface")

    return parts.checkpoints.save(state.global_step, write)


def restore_checkpoint(parts: TrainerParts, state: TrainerState, trainer_cfg: TrainerConfig) -> bool:
    """Resume per ``trainer.resume_mode`` into ``parts`` and ``state``; True when one was loaded.

    Raises:
        CheckpointError: ``resume_mode=resume_path`` with a missing or invalid checkpoint, or a
            checkpoint whose recorded step disagrees with its directory name.
    """
    path = parts.checkpoints.find_resume(trainer_cfg.resume_mode, trainer_cfg.resume_from_path)
    if path is None:
        return False
    parts.actor_rollout_wg.load_checkpoint(str(path / "actor"))
    if parts.critic_wg is not None:
        parts.critic_wg.load_checkpoint(str(path / "critic"))
    saved = safe_torch_load(
        path / "trainer_state.pt", "trainer.resume_mode / trainer.resume_from_path", "trainer state", map_location="cpu"
    )
    state.global_step, state.epoch = int(saved["global_step"]), int(saved["epoch"])
    state.extra = dict(saved.get("extra") or {})
    if state.global_step != step_of(path):
        raise CheckpointError(
            f"{path}: trainer_state.pt records step {state.global_step}, the directory says {step_of(path)}"
        )
    parts.train_dataloader.load_state_dict(saved["dataloader"])
    if parts.kl_ctrl is not None and saved["kl_ctrl"] is not None:
        parts.kl_ctrl.load_state_dict(saved["kl_ctrl"])
    restore_rng_state(saved["rng"])
    print(f"Resumed from {path} (global_step {state.global_step}, epoch {state.epoch})", flush=True)
    if trainer_cfg.del_local_ckpt_after_load:  # verl's flag: the loaded checkpoint directory is removed
        import shutil

        shutil.rmtree(path)
    return True
