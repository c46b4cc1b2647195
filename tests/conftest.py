"""Test-session setup: offline Hugging Face, shared data locations, a single Ray cluster."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = Path(os.environ.get("VERL_SHARED_DIR", REPO_ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's ../shared folder (real data and tokenizers); tests using it skip without it."""
    if not SHARED_DIR.is_dir():
        pytest.skip(f"shared data folder not found at {SHARED_DIR}")
    return SHARED_DIR


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised tiny Llama with the built-in character tokenizer (fast on CPU)."""
    from verl.modules.builtin import load_builtin_tokenizer
    from verl.modules.init_model import init_random_model

    root = tmp_path_factory.mktemp("tiny_model")
    load_builtin_tokenizer().save_pretrained(str(root / "tokenizer"))
    return init_random_model("llama", "tiny", root / "tokenizer", root / "model", seed=0)


DIGIT_REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Dense test reward: the fraction of digit characters in the response."""
    return sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))
'''


def tiny_run_overrides(model_dir: Path, run_dir: Path, **extra: object) -> list[str]:
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


@pytest.fixture(scope="session", autouse=True)
def _stop_ray_at_exit():
    """Ray is started at most once per test session (by the first Ray test) and stopped at the end."""
    yield
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
