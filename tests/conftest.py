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


@pytest.fixture(scope="session", autouse=True)
def _stop_ray_at_exit():
    """Ray is started at most once per test session (by the first Ray test) and stopped at the end."""
    yield
    import sys

    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
