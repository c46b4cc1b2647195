"""verl's step metrics, DAPO dynamic sampling and generation dumps, hand-computed."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo import metrics as M
from verl.trainer.ppo.dumps import dump_generations, pick_val_generations
from verl.trainer.ppo.dynamic_sampling import DynamicSampler, kept_group_mask


def _batch() -> DataProto:
    # 2 trajectories, prompt width P = 3, response width R = 4
    attention = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    return DataProto.from_dict(
        tensors={
            "prompts": torch.zeros(2, 3, dtype=torch.long),
            "responses": torch.zeros(2, 4, dtype=torch.long),
            "attention_mask": attention,
            "response_mask": attention[:, 3:],
            "token_level_scores": torch.tensor([[0.0, 1.0, 0, 0], [0, 0, 0, 0.5]]),
            "token_level_rewards": torch.tensor([[0.0, 1.0, 0, 0], [0, 0, 0, 0.5]]),
            "advantages": torch.zeros(2, 4),
            "returns": torch.zeros(2, 4),
        }
    )


def test_timing_per_token_uses_response_tokens_for_gen_and_all_tokens_otherwise():
    m = M.compute_timing_metrics(_batch(), {"gen": 0.6, "update_actor": 1.1, "reward": 0.3, "step": 3.0})
    # response tokens = 2 + 4 = 6; all tokens = (2 + 2) + (3 + 4) = 11
    assert m["timing_per_token_ms/gen"] == pytest.approx(100.0)
    assert m["timing_per_token_ms/update_actor"] == pytest.approx(1100.0 / 11)
    assert "timing_per_token_ms/reward" not in m and "timing_per_token_ms/step" not in m
    assert m["timing_s/reward"] == 0.3


def test_prompt_and_response_clip_ratio():
    m = M.compute_data_metrics(_batch(), use_critic=False)
    assert m["prompt_length/clip_ratio"] == 0.5  # prompt lengths 2 and 3 of width 3
    assert m["response_length/clip_ratio"] == 0.5  # response lengths 2 and 4 of width 4
    assert m["prompt_length/mean"] == 2.5


def test_global_seqlen_hand_computed():
    m = M.compute_seqlen_balance_metrics([1, 2, 3, 10], [[3], [0, 1, 2]])
    assert m == {
        "global_seqlen/min": 3.0,
        "global_seqlen/max": 13.0,
        "global_seqlen/minmax_diff": 10.0,
        "global_seqlen/balanced_min": 6.0,
        "global_seqlen/balanced_max": 10.0,
        "global_seqlen/mean": 8.0,
    }


def test_mfu_of_actor_and_critic(monkeypatch):
    monkeypatch.setattr(M, "device_peak_flops", lambda device="cpu": 1e12)
    m = M.compute_throughput_metrics(
        _batch(),
        {"step": 4.0, "update_actor": 2.0, "update_critic": 3.0},
        world_size=1,
        n_params=1000,
        ppo_epochs=1,
        device="cpu",
    )
    assert m["perf/mfu/actor"] == pytest.approx(6 * 1000 * 11 / (2.0 * 1e12))
    assert m["perf/mfu/critic"] == pytest.approx(6 * 1000 * 11 / (3.0 * 1e12))
    assert m["perf/throughput"] == pytest.approx(11 / 4.0)


def test_memory_metrics_are_positive_gib():
    m = M.compute_memory_metrics("cpu")
    assert set(m) == {"perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/cpu_memory_used_gb"}
    assert 0.01 < m["perf/max_memory_allocated_gb"] < 1024 and 0 < m["perf/cpu_memory_used_gb"] < 4096


def test_reduce_worker_metrics_accepts_lists_of_dicts():
    assert M.reduce_worker_metrics([{"a": 1.0}, {"a": 3.0, "b": [2.0, 4.0]}]) == {"a": 2.0, "b": 3.0}


def _scored(uids, scores, acc=None) -> DataProto:
    n = len(uids)
    d = DataProto.from_dict(
        tensors={"token_level_scores": torch.tensor(scores).unsqueeze(-1)},
        non_tensors={"uid": uids, **({"acc": acc} if acc is not None else {})},
    )
    assert len(d) == n
    return d


def test_kept_groups_vary_or_are_singletons():
    mask, kept, n = kept_group_mask(
        np.array(["a", "a", "b", "b", "c"], dtype=object), np.array([1.0, 1.0, 0.0, 1.0, 0.3])
    )
    assert mask.tolist() == [False, False, True, True, True] and kept == ["b", "c"] and n == 3


def test_dynamic_sampler_accumulates_until_full_and_drops_the_surplus():
    sampler = DynamicSampler("acc", max_num_gen_batches=0, train_batch_size=2)
    # batch 1: groups x (acc 1,1: dropped), y (1,0: kept)
    out, m = sampler.add(_scored(["x", "x", "y", "y"], [1.0, 1.0, 1.0, 0.0], acc=[1.0, 1.0, 1.0, 0.0]))
    assert out is None and m == {}
    # batch 2: z (0,1 kept), w (1,0 kept): only z is needed
    out, m = sampler.add(_scored(["z", "z", "w", "w"], [0.0, 1.0, 1.0, 0.0], acc=[0.0, 1.0, 1.0, 0.0]))
    assert list(out.non_tensor_batch["uid"]) == ["y", "y", "z", "z"]
    assert m == {
        "dynamic_sampling/num_gen_batches": 2.0,
        "dynamic_sampling/generated_groups": 4.0,
        "dynamic_sampling/kept_groups": 3.0,
        "dynamic_sampling/kept_ratio": 0.75,
    }
    assert sampler.num_gen_batches == 0 and sampler.parts == []


def test_dynamic_sampler_gives_up_after_max_batches_and_names_the_key():
    sampler = DynamicSampler(None, max_num_gen_batches=2, train_batch_size=1)
    sampler.add(_scored(["x", "x"], [1.0, 1.0]))
    with pytest.raises(RuntimeError, match="max_num_gen_batches"):
        sampler.add(_scored(["y", "y"], [0.0, 0.0]))
    with pytest.raises(KeyError, match="filter_groups.metric='nope'"):
        DynamicSampler("nope", 0, 1).add(_scored(["x"], [1.0]))


def test_val_generations_pick_is_verls_order(tmp_path):
    inputs, outputs, scores = ["c", "a", "b"], ["3", "1", "2"], [0.0, 1.0, 0.5]
    order = np.arange(3)
    np.random.RandomState(42).shuffle(order)
    by_input = [("a", "1", 1.0), ("b", "2", 0.5), ("c", "3", 0.0)]
    assert pick_val_generations(inputs, outputs, scores, 2) == [by_input[i] for i in order[:2]]
    rows = [
        {"input": i, "output": o, "score": s, "step": 7, "gts": g} for i, o, s, g in zip(inputs, outputs, scores, "31x")
    ]
    path = dump_generations(tmp_path, 7, rows)
    assert path.name == "7.jsonl" and [json.loads(line) for line in path.read_text().splitlines()] == rows


def test_ray_init_kwargs_reach_ray(monkeypatch):
    from verl.config import load_config
    from verl.single_controller import ray as ray_module
    from verl.trainer.ppo import builders

    seen = {}
    monkeypatch.setattr(ray_module, "ensure_ray", lambda **kw: seen.update(kw))
    monkeypatch.setattr(ray_module, "RayResourcePool", lambda world, device, nnodes=1: ("pool", world, device))
    cfg = load_config(
        None, ["trainer.backend=ray", "+ray_kwargs.ray_init.num_cpus=3", "+ray_kwargs.ray_init.namespace=verl_test"]
    )
    assert builders.build_resource_pool(cfg) == ("pool", 1, "cpu")
    assert seen == {"num_cpus": 3, "namespace": "verl_test"}


def test_file_logger_writes_verls_layout(tmp_path, monkeypatch):
    from verl.run.tracking import Tracking

    monkeypatch.delenv("VERL_FILE_LOGGER_PATH", raising=False)
    monkeypatch.setenv("VERL_FILE_LOGGER_ROOT", str(tmp_path / "logs"))
    tracker = Tracking(["file"], tmp_path / "out", project_name="proj", experiment_name="exp")
    tracker.log({"a": 1.5, "b": float("nan"), "c": "text"}, step=3)
    tracker.close()
    rows = [json.loads(x) for x in (tmp_path / "logs" / "proj" / "exp.jsonl").read_text().splitlines()]
    assert rows == [{"step": 3, "data": {"a": 1.5, "b": "nan"}}]
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(tmp_path / "one.jsonl"))
    tracker = Tracking(["file", "console"], tmp_path / "out", project_name="proj", experiment_name="exp")
    tracker.log({"a": 2}, step=4)
    tracker.close()
    assert json.loads((tmp_path / "one.jsonl").read_text()) == {"step": 4, "data": {"a": 2.0}}
