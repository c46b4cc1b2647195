"""Learning curves: the built-in quick start in ``separate_async`` (one batch ahead: staleness 1,
spans <= 2) ends within 3 points of held-out accuracy of the synchronous run at the same step count.

Slow (two 50-step quick starts); the plot of both curves is written by
``benchmarks/plot_async_learning.py`` from the same runs.
"""

from __future__ import annotations

import pytest
from run_helpers import read_metrics

from verl.commands.train import run

pytestmark = pytest.mark.slow


def _accuracy(run_dir, extra: list[str]) -> dict[int, dict]:
    run(
        "quickstart",
        [
            f"trainer.output_dir={run_dir / 'out'}",
            f"trainer.default_local_dir={run_dir / 'ckpt'}",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
            "trainer.plot=false",
            *extra,
        ],
    )
    return read_metrics(run_dir)


@pytest.fixture
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)  # one core each for training and generation (see benchmarks/README.md)
    yield
    torch.set_num_threads(before)


def test_separate_async_quickstart_learns_like_the_synchronous_run(tmp_path, one_thread):
    sync = _accuracy(tmp_path / "sync", ["actor_rollout_ref.hybrid_engine=false"])
    async_ = _accuracy(
        tmp_path / "async",
        [
            "trainer.v1.trainer_mode=separate_async",
            "trainer.v1.separate_async.parameter_sync_step=1",
            "trainer.v1.sampler.max_off_policy_threshold=2",
        ],
    )
    last = max(sync)
    assert async_[last]["val/accuracy"] >= sync[last]["val/accuracy"] - 0.03, (
        sync[last]["val/accuracy"],
        async_[last]["val/accuracy"],
    )
    assert async_[last]["val/accuracy"] >= async_[0]["val/accuracy"] + 0.2  # it really learned
    # one batch ahead: every trained batch after the first was started by the previous weights
    assert max(async_[s]["training/off_policy/trajectory_staleness_worst/max"] for s in async_ if s > 0) == 1.0
