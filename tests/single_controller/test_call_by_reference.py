"""`BaseWorkerGroup.call_by_reference`: a rank's result handed to another group without the driver.

Used by the separate rollout's weight sync (`verl.trainer.ppo.split_rollout`): actor rank 0's bucket
goes to every rollout rank as an object-store reference.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Worker, register
from verl.single_controller.local import LocalWorkerGroup


class Producer(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def make(self, n: int) -> list[tuple[str, torch.Tensor]]:
        if n < 0:
            raise ValueError("n must be >= 0")
        return [("t", torch.arange(n, dtype=torch.float32) * (self.rank + 1))]

    @register(Dispatch.DP_COMPUTE_PROTO)
    def echo(self, data: DataProto) -> DataProto:
        return data


class Consumer(Worker):
    @register(Dispatch.ONE_TO_ALL)
    def total(self, bucket: list[tuple[str, torch.Tensor]]) -> tuple[int, float]:
        return self.rank, float(bucket[0][1].sum())


def test_in_process_the_handles_are_the_values():
    producer, consumer = LocalWorkerGroup(Producer), LocalWorkerGroup(Consumer)
    handles = producer.call_by_reference("make", 4)
    assert len(handles) == 1 and torch.equal(handles[0][0][1], torch.tensor([0.0, 1.0, 2.0, 3.0]))
    assert consumer.total(handles[0]) == [(0, 6.0)]
    with pytest.raises(ValueError, match="DP_COMPUTE_PROTO"):
        producer.call_by_reference("echo", DataProto.from_dict(tensors={"x": torch.zeros(2)}))


@pytest.mark.slow  # two Ray groups; the local test keeps the reference passing in the default suite
@pytest.mark.ray
def test_on_ray_rank_zeros_result_reaches_every_rank_of_another_group_as_a_reference():
    import sys

    import ray
    from ray import cloudpickle

    from verl.single_controller.ray import RayWorkerGroup, WorkerError

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # pytest imports this file under a name workers lack

    cfg = SimpleNamespace(device="cpu", hang_timeout_s=None, output_dir=None)
    producer = RayWorkerGroup(Producer, 2, cfg, role="producer")
    consumer = RayWorkerGroup(Consumer, 2, cfg, role="consumer")
    try:
        n = 1 << 18  # 1 MiB of float32: an object in the shared-memory store, not inlined in the reply
        handles = producer.call_by_reference("make", n)
        assert len(handles) == 2 and all(isinstance(h, ray.ObjectRef) for h in handles)
        expected = float(n * (n - 1) / 2)
        assert consumer.total(handles[0]) == [(0, expected), (1, expected)]  # rank 0's tensor, on both ranks
        assert consumer.total(handles[1]) == [(0, 2 * expected), (1, 2 * expected)]
        with pytest.raises(WorkerError, match=r"(?s)^producer worker rank \d failed in make\(\): .*n must be >= 0"):
            producer.call_by_reference("make", -1)
    finally:
        producer.shutdown()
        consumer.shutdown()
        producer.pool.release()
        consumer.pool.release()
