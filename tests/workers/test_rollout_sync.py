"""`SyncedRollout`: when the rollout engine's weights are refreshed from the actor's engine."""

from __future__ import annotations

import copy

import torch

from verl.config.schema import FSDPConfig, OptimConfig
from verl.engine import MicroBatchSpec, build_engine
from verl.protocol import DataProto
from verl.workers.rollout_sync import SyncedRollout


class CopyEngine:
    """A rollout engine generating with its own copy of the weights (as under FSDP2), refreshed by
    state dict: it exposes no ``module`` (an engine that does is refreshed in place, parameter by
    parameter, see tests/workers/test_rollout_sync_inplace.py)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.copy = copy.deepcopy(module)
        self.updates = 0

    def update_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.copy.load_state_dict(state)
        self.updates += 1

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"y": self.copy(prompts.batch["x"]).detach()})


def _actor():
    torch.manual_seed(0)
    return build_engine(torch.nn.Linear(3, 1), FSDPConfig(), 1, optim=OptimConfig(lr=0.5, weight_decay=0.0))


def _step(actor) -> None:
    data = DataProto.from_dict(tensors={"x": torch.randn(4, 3), "response_mask": torch.ones(4, 1)})

    def loss_fn(module, micro, counts):
        return module(micro.batch["x"]).sum() / counts.sequences, {}

    actor.train_batch(data, loss_fn, MicroBatchSpec())


def test_copy_is_refreshed_only_after_the_actor_changed_and_then_matches_it():
    actor = _actor()
    engine = CopyEngine(actor.module)
    rollout = SyncedRollout(engine, shared=False)
    prompts = DataProto.from_dict(tensors={"x": torch.randn(2, 3)})
    rollout.sync_weights(actor)
    assert engine.updates == 0  # fresh copy: nothing to sync
    _step(actor)
    assert not torch.equal(engine.copy.weight, actor.module.weight)  # stale until synced
    rollout.mark_stale()
    rollout.sync_weights(actor)
    rollout.sync_weights(actor)
    assert engine.updates == 1 and rollout.last_sync_s >= 0.0
    torch.testing.assert_close(
        rollout.generate_sequences(prompts).batch["y"], actor.module(prompts.batch["x"]).detach()
    )
    rollout.sync_weights(actor, force=True)  # after a checkpoint load
    assert engine.updates == 2


def test_shared_module_never_syncs():
    actor = _actor()
    engine = CopyEngine(actor.module)
    rollout = SyncedRollout(engine, shared=True)
    rollout.mark_stale()
    rollout.sync_weights(actor, force=True)
    assert engine.updates == 0


def test_unreported_sync_seconds_add_up_until_taken_then_reset(monkeypatch):
    import verl.workers.rollout_sync as rs

    clock = iter([10.0, 10.5, 20.0, 20.25, 30.0, 31.0])  # start/end of three syncs: 0.5 s, 0.25 s, 1.0 s
    monkeypatch.setattr(rs.time, "perf_counter", lambda: next(clock))
    actor = _actor()
    rollout = SyncedRollout(CopyEngine(actor.module), shared=False)
    assert rollout.take_unreported_sync_s() == 0.0  # nothing synced yet
    for _ in range(2):  # e.g. a validation generation, then the next step's training generation
        rollout.mark_stale()
        rollout.sync_weights(actor)
    rollout.sync_weights(actor)  # current: no sync, no time
    assert rollout.take_unreported_sync_s() == 0.75
    assert rollout.take_unreported_sync_s() == 0.0  # reported once, never repeated
    rollout.sync_weights(actor, force=True)
    assert rollout.take_unreported_sync_s() == 1.0 and rollout.last_sync_s == 1.0
