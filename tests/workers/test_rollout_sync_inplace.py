"""In-place, per-parameter rollout weight sync (issue 14): same result as a state-dict load."""

from __future__ import annotations

import copy

import pytest
import torch

from verl.workers.rollout_sync import SyncedRollout, sync_in_place


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)
        self.b.weight.requires_grad_(False)  # frozen: copied at the first sync only
        self.register_buffer("scale", torch.ones(2))


def test_sync_in_place_copies_into_the_same_tensors():
    torch.manual_seed(0)
    src, dst = _Net(), _Net()
    ptr = dst.a.weight.data_ptr()
    assert sync_in_place(src, dst) == 5  # 4 parameters + 1 buffer
    assert all(torch.equal(x, y) for x, y in zip(src.state_dict().values(), dst.state_dict().values(), strict=True))
    assert dst.a.weight.data_ptr() == ptr
    with torch.no_grad():
        src.a.weight.add_(1.0)
        src.b.weight.add_(1.0)
    assert sync_in_place(src, dst, trainable_only=True) == 3  # a.weight, a.bias, b.bias
    assert torch.equal(src.a.weight, dst.a.weight) and not torch.equal(src.b.weight, dst.b.weight)


def test_synced_rollout_uses_the_engine_module_and_only_trainables_after_the_first_sync():
    class Engine:
        def __init__(self, module):
            self.module = module

        def update_weights(self, state):  # the state-dict path must not be taken
            raise AssertionError("state-dict sync used")

    class Actor:
        def __init__(self, module):
            self.module = module

    torch.manual_seed(0)
    src = _Net()
    engine = Engine(copy.deepcopy(src))
    with torch.no_grad():
        src.b.weight.mul_(2.0)
    synced = SyncedRollout(engine, shared=False)
    synced.mark_stale()
    synced.sync_weights(Actor(src))
    assert torch.equal(engine.module.b.weight, src.b.weight)  # first sync: everything
    with pytest.raises(KeyError):
        sync_in_place(torch.nn.Linear(2, 2), engine.module)
