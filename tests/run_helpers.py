"""Shared helpers for tests that run the trainer (imported as ``from run_helpers import ...``).

Kept out of ``conftest.py``: several test folders have a ``conftest.py`` and only one module of
that name can be imported.
"""

from __future__ import annotations

from pathlib import Path

DIGIT_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Dense test reward: the fraction of digit characters in the response."""
    return sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))
'''


def tiny_run_overrides(model_dir: Path | str, run_dir: Path, **extra: object) -> list[str]:
    """Overrides for a fast RL run of the tiny model on the built-in task (tests only)."""
    reward = run_dir / "digit_reward.py"
    run_dir.mkdir(parents=True, exist_ok=True)
    reward.write_text(DIGIT_REWARD)
    base = {
        "actor_rollout_ref.model.path": str(model_dir),
        "algorithm.adv_estimator": "grpo",
        "actor_rollout_ref.rollout.n": 2,
        "data.train_batch_size": 4,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 4,
        "data.max_prompt_length": 24,
        "data.max_response_length": 6,
        "data.val_files": "[]",
        "actor_rollout_ref.actor.optim.lr": 1e-3,
        "trainer.total_training_steps": 2,
        "trainer.val_before_train": False,
        "trainer.logger": "[jsonl]",
        "trainer.progress_bar": False,
        "trainer.plot": False,
        "trainer.output_dir": str(run_dir / "out"),
        "trainer.default_local_dir": str(run_dir / "ckpt"),
        "custom_reward_function.path": str(reward),
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def read_metrics(run_dir: Path) -> dict[int, dict]:
    """Per-step metrics of a run (the last record of each step wins, as after a resume)."""
    import json

    out: dict[int, dict] = {}
    path = run_dir / "out" / "metrics.jsonl"
    for line in path.read_text().splitlines():
        row = json.loads(line)
        out[int(row["step"])] = row
    return out
