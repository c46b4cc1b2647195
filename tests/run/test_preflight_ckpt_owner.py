"""A checkpoint folder belongs to one run (issue 12, shared folders; rule in
`verl.run.run_identity`): another run never resumes from, overwrites or prunes it."""

from __future__ import annotations

import json

import pytest
from run_helpers import read_metrics, tiny_run_overrides

from verl.config import load_config
from verl.trainer import RLTrainer
from verl.run.checkpoint import check_checkpoint
from verl.run.run_identity import OWNER_FILE, check_owner, claim_owner
from verl.utils.errors import CheckpointLoadError


def _cfg(model_dir, run_dir, **extra):
    return load_config(None, tiny_run_overrides(model_dir, run_dir, **extra))


def test_owner_rule_on_configs(tiny_model_dir, tmp_path):
    a = _cfg(tiny_model_dir, tmp_path / "a", **{"trainer.default_local_dir": str(tmp_path / "shared")})
    claim_owner(a)
    owner = json.loads((tmp_path / "shared" / OWNER_FILE).read_text())
    assert owner["keys"]["trainer.seed"] == 1 and len(owner["run_id"]) == 16
    # the same run with other steps / lr / workers / loggers is still the same run
    same = _cfg(
        tiny_model_dir,
        tmp_path / "a2",
        **{
            "trainer.default_local_dir": str(tmp_path / "shared"),
            "trainer.total_training_steps": 9,
            "actor_rollout_ref.actor.optim.lr": 1e-5,
            "trainer.n_gpus_per_node": 2,
            "trainer.logger": "[console]",
        },
    )
    assert "this run's folder" in check_owner(same)
    for key, value in (("trainer.seed", 2), ("trainer.experiment_name", "other"), ("algorithm.adv_estimator", "rloo")):
        other = _cfg(
            tiny_model_dir, tmp_path / "b", **{"trainer.default_local_dir": str(tmp_path / "shared"), key: value}
        )
        with pytest.raises(CheckpointLoadError, match=f"another run .*{key}=") as info:
            claim_owner(other)
        assert "\n" not in str(info.value)
    assert json.loads((tmp_path / "shared" / OWNER_FILE).read_text()) == owner  # not taken over


@pytest.mark.e2e
def test_other_run_refused_before_its_first_step_and_checkpoints_untouched(tiny_model_dir, tmp_path):
    shared = tmp_path / "shared"
    RLTrainer(
        config=_cfg(
            tiny_model_dir,
            tmp_path / "a",
            **{"trainer.default_local_dir": str(shared), "trainer.save_freq": 1, "trainer.max_actor_ckpt_to_keep": 1},
        )
    ).fit()
    before = {p.name: p.stat().st_mtime_ns for p in shared.rglob("*")}
    for mode in ("auto", "disable"):
        b = _cfg(
            tiny_model_dir,
            tmp_path / f"b_{mode}",
            **{
                "trainer.default_local_dir": str(shared),
                "trainer.seed": 5,
                "trainer.save_freq": 1,
                "trainer.max_actor_ckpt_to_keep": 1,
                "trainer.resume_mode": mode,
            },
        )
        with pytest.raises(CheckpointLoadError, match="holds checkpoints of another run"):
            RLTrainer(config=b).fit()
        assert not (tmp_path / f"b_{mode}" / "out" / "metrics.jsonl").exists()
    assert {p.name: p.stat().st_mtime_ns for p in shared.rglob("*")} == before
    assert check_checkpoint(shared / "global_step_2") is None
    # told explicitly: another run starts from A's checkpoint in a folder of its own
    c = _cfg(
        tiny_model_dir,
        tmp_path / "c",
        **{
            "trainer.default_local_dir": str(tmp_path / "c_ckpt"),
            "trainer.seed": 5,
            "trainer.total_training_steps": 3,
            "trainer.save_freq": 1,
            "trainer.resume_mode": "resume_path",
            "trainer.resume_from_path": str(shared / "global_step_2"),
        },
    )
    RLTrainer(config=c).fit()
    assert sorted(read_metrics(tmp_path / "c")) == [3]
    assert (tmp_path / "c_ckpt" / "global_step_3").is_dir() and (tmp_path / "c_ckpt" / OWNER_FILE).is_file()
    assert {p.name: p.stat().st_mtime_ns for p in shared.rglob("*")} == before


def test_folder_without_owner_file_is_adopted(tiny_model_dir, tmp_path):
    legacy = tmp_path / "legacy"
    (legacy / "global_step_1").mkdir(parents=True)
    cfg = _cfg(tiny_model_dir, tmp_path, **{"trainer.default_local_dir": str(legacy)})
    assert "no other run's checkpoints" in check_owner(cfg)
    claim_owner(cfg)
    assert "this run's folder" in check_owner(cfg)
