"""``rollout.checkpoint_engine.*``: every value takes effect or is refused in one line.

The bucket size reaches the colocated vLLM engine's weight sync (`EngineWeightSync`, driven here
through a recording stand-in for vLLM's ``collective_rpc``, so no vLLM is needed) as it reaches
the separate rollout pool (tests/trainer/ppo/test_split_rollout.py::test_tiny_buckets_give_the_same_run).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from verl.config import ConfigError, load_config
from verl.config.compat.verl_keys import check_compat
from verl.workers.rollout.vllm.vllm_weights import EngineWeightSync
from verl.workers.rollout.weight_sync import bucket_bytes_of

CE = "actor_rollout_ref.rollout.checkpoint_engine"


def _model() -> nn.Module:
    # 3 matrices of 512 x 512 float32 = 1 MiB each, + a 1 KiB bias: 3 MiB + 1 KiB in all
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(512, 512, bias=False), nn.Linear(512, 512, bias=False), nn.Linear(512, 512, bias=True)
    )


class _RecordingEngine:
    """What `EngineWeightSync` calls on vLLM (``collective_rpc``), recorded bucket by bucket."""

    def __init__(self) -> None:
        self.buckets: list[list[str]] = []

    def rpc(self, method: str, args: tuple) -> list:
        if method == "verl_load_bucket":
            self.buckets.append([name for name, _ in args[0]])
        return [[]]  # verl_finish_weight_update: no engine parameter left unset


@pytest.mark.parametrize(
    "megabytes, expected",
    [
        (2048, [["0.weight", "1.weight", "2.weight", "2.bias"]]),  # the default: one bucket
        (2, [["0.weight", "1.weight"], ["2.weight", "2.bias"]]),
        (1, [["0.weight"], ["1.weight"], ["2.weight"], ["2.bias"]]),  # 1 MiB + the bias would exceed 1 MiB
    ],
)
def test_colocated_vllm_sync_uses_the_configured_bucket_size(megabytes, expected):
    cfg = load_config(None, [f"{CE}.update_weights_bucket_megabytes={megabytes}"])
    assert bucket_bytes_of(cfg.actor_rollout_ref.rollout) == megabytes * 2**20
    engine = _RecordingEngine()
    sync = EngineWeightSync(
        engine.rpc, lambda lora_id: None, lora=False, bucket_bytes=bucket_bytes_of(cfg.actor_rollout_ref.rollout)
    )
    sync.update(_model())
    assert engine.buckets == expected
    assert sync.last_buckets == len(expected) and sync.last_tensors == 4
    assert sync.last_bytes == 3 * 2**20 + 512 * 4


@pytest.mark.parametrize("hybrid", [True, False])
@pytest.mark.parametrize("name", ["hf", "vllm"])
@pytest.mark.parametrize(
    "field, value, message",
    [
        ("backend", "nccl", rf"^`{CE}.backend` is not supported yet: 'nccl'"),
        ("update_weights_bucket_megabytes", 0, rf"^{CE}.update_weights_bucket_megabytes: must be > 0, got 0$"),
        ("update_weights_bucket_megabytes", -5, rf"^{CE}.update_weights_bucket_megabytes: must be > 0, got -5$"),
        (
            "engine_kwargs",
            {"nccl": {"rebuild_group": False}},
            rf"^`{CE}.engine_kwargs` is not supported yet: \['nccl'\]",
        ),
    ],
)
def test_checkpoint_engine_values_that_cannot_take_effect_are_refused_everywhere(field, value, message, name, hybrid):
    # checked on a loaded config: loading rollout.name=vllm needs vLLM installed, this rule does not
    cfg = load_config(None)
    rollout = cfg.actor_rollout_ref.rollout
    cfg.actor_rollout_ref.hybrid_engine, rollout.name = hybrid, name
    setattr(rollout.checkpoint_engine, field, value)
    with pytest.raises(ConfigError, match=message) as err:
        check_compat(cfg)
    assert "\n" not in str(err.value)


def test_checkpoint_engine_refusals_on_the_command_line():
    with pytest.raises(ConfigError, match=rf"^`{CE}.backend` is not supported yet: 'nixl'"):
        load_config(None, [f"{CE}.backend=nixl"])  # colocated hf: refused too, not ignored
    with pytest.raises(ConfigError, match=rf"^`{CE}.engine_kwargs` is not supported yet"):
        load_config(None, [f"+{CE}.engine_kwargs.nccl.rebuild_group=false"])


@pytest.mark.parametrize("name", ["hf", "vllm"])
def test_checkpoint_engine_values_that_take_effect_pass(name):
    cfg = load_config(
        None, [f"{CE}.update_weights_bucket_megabytes=512", f"{CE}.backend=naive", f"+{CE}.engine_kwargs.naive={{}}"]
    )
    cfg.actor_rollout_ref.rollout.name = name
    check_compat(cfg)
    assert bucket_bytes_of(cfg.actor_rollout_ref.rollout) == 512 * 2**20
