"""Streaming rewards in the RL loops (``reward_model.streaming``, `verl.trainer.ppo.streaming_reward`).

Streaming on and off give the same ``token_level_scores``, per-sample extra info and metrics on the
same seeds, in the synchronous step and in ``separate_async`` (staleness 0), with a custom reward
function that raises for one prompt's samples and hangs past its deadline on another's: both are
contained (0 reward, counted in ``reward/num_errors`` / ``reward/num_timeouts``, masked out of the
loss) while the other samples are scored. A reward model on its own pool streams in micro-batches.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from run_helpers import read_metrics

from verl.config import ConfigError, load_config
from verl.protocol import DataProto
from verl.reward import create_reward_manager
from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer import RLTrainer
from verl.trainer.ppo.streaming_reward import StreamingRewards, build_streaming_rewards

from tests.trainer.ppo.test_split_rollout import builtin_overrides, comparable

# step 1 of these runs trains prompts 428 511 179 3454 2053 3477 2621 1754, step 2 3331 1207 3867
# 3735 3669 3150 4000 1273 (rollout.n=2): one prompt raises and one hangs in each step; with n=2 a
# hung prompt is 2 timeouts in a row, below the batch manager's "hung scorer" cut-off of 3
FLAKY_REWARD = """
import time
from verl.reward import default_compute_score

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info["index"] in (511, 1207):
        raise RuntimeError("scorer bug")
    if extra_info["index"] in (2053, 3867):
        time.sleep(3.0)  # past reward_model.timeout_s
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)
"""


def _overrides(run_dir: Path, streaming: bool, **extra: object) -> list[str]:
    run_dir.mkdir(parents=True, exist_ok=True)
    reward = run_dir / "flaky_reward.py"
    reward.write_text(FLAKY_REWARD)
    return builtin_overrides(
        run_dir,
        **{
            "trainer.total_training_steps": 2,
            "data.val_files": "[]",
            "trainer.test_freq": -1,
            "actor_rollout_ref.rollout.n": 2,
            "custom_reward_function.path": str(reward),
            "reward_model.timeout_s": 0.5,
            "reward_model.streaming": streaming,
            **extra,
        },
    )


def assert_same_metrics(a: dict[int, dict], b: dict[int, dict]) -> int:
    """Every non-timing metric of run ``a`` equal in ``b`` (numbers within 1e-6); returns how many."""
    assert sorted(a) == sorted(b)
    n = 0
    for step in a:
        ra, rb = comparable(a[step]), comparable(b[step])
        assert set(ra) == set(rb), (step, set(ra) ^ set(rb))
        for k, v in ra.items():
            if k.startswith(("trainer/", "rollouter/")) or k.endswith("_s"):  # the loops' own time / load readings
                continue
            assert (rb[k] == pytest.approx(v, abs=1e-6, rel=0, nan_ok=True)) if isinstance(v, float) else rb[k] == v, (
                step,
                k,
                v,
                rb[k],
            )
            n += 1
    return n


class _Recorder:
    """Wraps a trainer's reward stage and generation: the scored batches, the rows streamed."""

    def __init__(self, trainer: RLTrainer) -> None:
        self.scores: list[torch.Tensor] = []
        self.flags: list[tuple[list, list]] = []
        self.streamed = 0
        reward, generate = trainer._compute_reward, trainer.generate_scored

        def compute_reward(batch: DataProto, pending=None):
            metrics = reward(batch, pending)
            self.scores.append(batch.batch["token_level_scores"].clone())
            nt = batch.non_tensor_batch
            self.flags.append((list(nt.get("reward_error", [])), list(nt.get("reward_timeout", []))))
            return metrics

        def generate_scored(wg, gen, prompts):
            out, pending = generate(wg, gen, prompts)
            self.streamed += len(pending.reported) if pending is not None else 0  # handed over during the call
            return out, pending

        trainer._compute_reward, trainer.generate_scored = compute_reward, generate_scored


def _run(run_dir: Path, streaming: bool, **extra: object) -> tuple[dict[int, dict], _Recorder, RLTrainer]:
    trainer = RLTrainer(config=load_config(None, _overrides(run_dir, streaming, **extra)))
    rec = _Recorder(trainer)
    trainer.fit()
    return read_metrics(run_dir), rec, trainer


def _assert_same(tmp_path: Path, **extra: object) -> tuple[dict[int, dict], _Recorder]:
    off, rec_off, t_off = _run(tmp_path / "off", False, **extra)
    on, rec_on, t_on = _run(tmp_path / "on", True, **extra)
    assert t_off._streaming is False and isinstance(t_on._streaming, StreamingRewards)
    assert rec_off.streamed == 0 and rec_on.streamed == 32  # every trajectory of both steps handed over in its call
    assert len(rec_on.scores) == len(rec_off.scores) == 2
    for a, b in zip(rec_off.scores, rec_on.scores, strict=True):
        assert torch.equal(a, b)
    assert rec_on.flags == rec_off.flags
    assert assert_same_metrics(off, on) > 50
    for step in (1, 2):  # 2 samples raised, 2 timed out: contained, counted, left out of the loss
        assert on[step]["reward/num_errors"] == 2.0 and on[step]["reward/num_timeouts"] == 2.0
        assert on[step]["reward/num_masked"] == 4.0
    assert any(float(s.sum()) > 0 for s in rec_on.scores)  # the other samples were really scored
    return on, rec_on


@pytest.mark.e2e
def test_sync_step_streaming_equals_scoring_after_generation(tmp_path):
    _assert_same(tmp_path)


@pytest.mark.e2e
def test_separate_async_streaming_equals_scoring_after_generation(tmp_path):
    on_policy = {
        "actor_rollout_ref.hybrid_engine": False,
        "trainer.v1.trainer_mode": "separate_async",
        "trainer.v1.separate_async.parameter_sync_step": 1,
        "trainer.v1.separate_async.num_warmup_batches": 0,
        "trainer.v1.sampler.max_off_policy_threshold": 0,
    }
    _assert_same(tmp_path, **on_policy)


class _DigitRewardModel:
    """A reward-model group stand-in: the share of even token ids, on the last response token; records call sizes."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def compute_rm_score(self, data: DataProto) -> DataProto:
        self.calls.append(len(data))
        mask = data.batch["response_mask"]
        even = ((data.batch["responses"] % 2 == 0) * mask).sum(1).float() / mask.sum(1).clamp(min=1)
        scores = torch.zeros(mask.shape)
        scores[torch.arange(len(data)), (mask.sum(1) - 1).clamp(min=0)] = even
        return DataProto.from_dict(tensors={"rm_scores": scores})

    def shutdown(self) -> None:
        pass


def test_a_reward_model_on_its_own_pool_streams_in_micro_batches(tmp_path):
    runs = {}
    for streaming in (False, True):
        trainer = RLTrainer(
            config=load_config(
                None,
                _overrides(
                    tmp_path / str(streaming),
                    streaming,
                    **{"reward_model.placement": "separate", "trainer.total_training_steps": 1},
                ),
            )
        )
        rm = _DigitRewardModel()
        trainer._parts().rm_wg = rm
        rec = _Recorder(trainer)
        trainer.fit()
        runs[streaming] = (read_metrics(tmp_path / str(streaming)), rec, rm)
    (off, rec_off, rm_off), (on, rec_on, rm_on) = runs[False], runs[True]
    assert rm_off.calls == [16] and sum(rm_on.calls) == 16 and len(rm_on.calls) > 1  # finished rows, call by call
    assert torch.allclose(rec_off.scores[0], rec_on.scores[0], atol=0, rtol=0)
    assert assert_same_metrics(off, on) > 50


def test_what_streams_and_what_is_scored_after_generation(tmp_path):
    cfg = load_config(None, _overrides(tmp_path, True))
    naive = create_reward_manager("naive", None)
    assert isinstance(build_streaming_rewards(cfg, naive, None), StreamingRewards)
    assert (
        build_streaming_rewards(cfg, create_reward_manager("batch", None), None) is None
    )  # may score the batch as a whole
    assert (
        build_streaming_rewards(cfg, naive, _DigitRewardModel()) is None
    )  # a colocated reward model: after generation
    cfg.reward_model.placement = "separate"
    assert isinstance(build_streaming_rewards(cfg, naive, _DigitRewardModel()), StreamingRewards)
    cfg.reward_model.num_workers = 0
    with pytest.raises(
        ConfigError, match="reward_model.num_workers: scoring threads of streaming rewards must be >= 1"
    ):
        build_streaming_rewards(cfg, naive, None)
    off = load_config(None, _overrides(tmp_path, False))
    assert build_streaming_rewards(off, naive, None) is None


class _ChunkedEngine:
    """An engine that hands rows 0-1, then row 3, to its finish hook and never reports row 2."""

    def __init__(self) -> None:
        self.on_trajectories_finished = None

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        b = len(prompts)
        responses = torch.arange(b * 3).reshape(b, 3) + prompts.batch["input_ids"][:, :1]
        out = DataProto.from_dict(
            tensors={"responses": responses, "response_mask": torch.ones(b, 3, dtype=torch.long)},
            non_tensors={"uid": prompts.non_tensor_batch["uid"]},
        )
        for rows in ([0, 1], [3]):
            if self.on_trajectories_finished is not None:
                self.on_trajectories_finished(rows, out[torch.tensor(rows)])
        return out


class _EngineWorker(Worker):
    def __init__(self) -> None:
        super().__init__("cpu")
        self.rollout = _ChunkedEngine()

    @register(Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        return self.rollout.generate_sequences(prompts)


def _toy_reward(data: DataProto, return_dict: bool = True) -> dict:
    """Sum of the response ids on the last token; the data source of each row; a count."""
    r = data.batch["responses"]
    tensor = torch.zeros(r.shape)
    tensor[:, -1] = r.sum(1).float()
    return {
        "reward_tensor": tensor,
        "reward_extra_info": {"src": list(data.non_tensor_batch["data_source"])},
        "reward_metrics": {"reward/num_errors": float(len(data))},
    }


def test_streamed_rows_join_their_prompt_fields_and_unreported_rows_are_scored_after_the_call():
    from verl.single_controller.local import LocalWorkerGroup

    wg = LocalWorkerGroup(_EngineWorker)
    gen = DataProto.from_dict(
        tensors={"input_ids": torch.tensor([[5], [6], [7], [8]])},
        non_tensors={"uid": np.array(list("abcd"), dtype=object)},
    )
    prompts = DataProto.from_dict(
        non_tensors={
            "uid": np.array(list("abcd"), dtype=object),
            "data_source": np.array(["s0", "s1", "s2", "s3"], dtype=object),
        }
    )
    streaming = StreamingRewards(_toy_reward, workers=2, per_row=True)
    out, pending = streaming.generate(wg, gen, prompts)
    assert pending.reported == {0, 1, 3} and len(pending.futures) == 3  # one call per trajectory
    assert wg.workers[0].rollout.on_trajectories_finished is None  # the hook is removed after the call
    batch = prompts.union(out)
    got, want = pending.result(batch), _toy_reward(batch)
    assert len(pending.futures) == 4  # row 2 scored after the call
    assert torch.equal(got["reward_tensor"], want["reward_tensor"])
    assert got["reward_extra_info"] == {"src": ["s0", "s1", "s2", "s3"]} and got["reward_metrics"] == {
        "reward/num_errors": 4.0
    }
    streaming.close()
    assert streaming.generate(type("RayLike", (), {"generate_sequences": lambda self, g: "out"})(), gen, prompts) == (
        "out",
        None,
    )


@pytest.mark.parametrize("key", ["reward.streaming", "reward_model.streaming"])
def test_both_spellings_switch_streaming_off(key):
    assert load_config(None, []).reward_model.streaming is True
    assert load_config(None, [f"{key}=false"]).reward_model.streaming is False
