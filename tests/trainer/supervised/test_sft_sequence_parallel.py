"""SFT with Ulysses sequence parallelism: 2 torchrun ranks at ``ulysses_sequence_parallel_size=2``
(one data shard, each sequence split over both ranks) give the losses of one process."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_sft_trainer import BUILTIN, _run, dirs, losses

from verl.config.errors import ConfigError
from verl.config.sft_loader import load_sft_config


@pytest.mark.e2e
@pytest.mark.slow  # suite time: the default suite keeps a faster test of the same path
def test_sft_sp2_equals_one_process(tmp_path: Path) -> None:
    common = [
        *BUILTIN,
        "data.val_files=builtin://arithmetic_answers/test",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        "trainer.total_training_steps=3",
        "use_remove_padding=true",
    ]
    for name, nproc, sp in (("one", 1, 1), ("sp2", 2, 2)):
        r = _run([*common, *dirs(tmp_path, name), f"ulysses_sequence_parallel_size={sp}"], nproc)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    one, sp2 = losses(tmp_path, "one"), losses(tmp_path, "sp2")
    assert sorted(one) == [1, 2, 3] and one[3] != one[1]
    for step in one:
        assert sp2[step] == pytest.approx(one[step], abs=1e-5), step
    # 8 rows in micro-batches of 2: 4 split forwards a step (without SP the losses would agree too)
    assert losses(tmp_path, "sp2", "perf/sp_split_forwards") == {1: 4.0, 2: 4.0, 3: 4.0}
    assert losses(tmp_path, "sp2", "val/loss")[3] == pytest.approx(losses(tmp_path, "one", "val/loss")[3], abs=1e-5)


def test_sft_sp_needs_packed_forwards_and_sft():
    with pytest.raises(ConfigError, match="ulysses_sequence_parallel_size=2 needs use_remove_padding=true"):
        load_sft_config(None, [*BUILTIN, "ulysses_sequence_parallel_size=2", "use_remove_padding=false"])
    with pytest.raises(ConfigError, match="trainer.algorithm=dpo is not supported yet"):
        load_sft_config(
            None, [*BUILTIN, "ulysses_sequence_parallel_size=2", "use_remove_padding=true"], algorithm="dpo"
        )
