"""`RayWorkerGroup`: one Ray actor per device (or per CPU slot) in a placement group.

Each actor hosts one instance of the worker class. Before constructing it the host sets the
rank environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``,
``VERL_DEVICE``), so `Worker.__init__` joins the process group (gloo on CPU, nccl on CUDA).
Calls are dispatched and collected by the shared functions of `verl.single_controller.base`.

Failure handling: results are awaited with ``ray.wait`` in short slices; when any rank's call
fails or its process dies, the group kills every actor and raises `WorkerError` naming the role,
the rank and the worker's own error — without waiting for the surviving ranks, which may be
blocked in a collective with the dead one. A call that outlives its deadline (derived from the
method's measured history, `verl.single_controller.watchdog`) is a hang: every worker's Python
stack is dumped to stderr and ``<trainer.output_dir>/hang_stacks.txt``, the actors are killed
and `HangError` names the role, the method, the ranks that did not answer and their state.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from verl.single_controller.base import BaseWorkerGroup
from verl.single_controller.watchdog import (
    STACK_DIR_ENV,
    call_key,
    dump_stacks,
    format_report,
    install_stack_dumper,
    process_state,
)
from verl.utils.errors import HangError


class WorkerError(RuntimeError):
    """A worker process failed or died; the message names role, rank and the cause."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_ray(num_cpus: int | None = None, **ray_init: Any) -> None:
    """Start (or join) Ray once per process: no dashboard, auth disabled for local clusters.

    Args:
        num_cpus: CPUs Ray may schedule on (None = Ray's default).
        **ray_init: Further ``ray.init`` keyword arguments (``ray_kwargs.ray_init.*``); they
            override the defaults above.
    """
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    kwargs: dict[str, Any] = {
        "num_cpus": num_cpus,
        "include_dashboard": False,
        "log_to_driver": True,
        "ignore_reinit_error": True,
        **ray_init,
    }
    ray.init(**kwargs)


class RayResourcePool:
    """A placement group of ``world_size`` bundles (1 CPU, + 1 GPU on CUDA) shared by colocated groups.

    Worker groups built on the same pool place rank r of each group on bundle r (the hybrid
    engine: actor, critic and reference of rank r share one device); a role given its own pool
    gets its own devices. The bundles reserve the resources; the hosted actors ask for a small
    fraction of them, so several groups fit on one pool.
    """

    def __init__(self, world_size: int, device: str = "cpu", nnodes: int = 1) -> None:
        import ray
        from ray.util.placement_group import placement_group

        # on CPU a bundle is a logical worker slot: allow a few pools (separate placements) per core
        ensure_ray(num_cpus=max(4 * world_size, os.cpu_count() or 1) if device == "cpu" else None)
        self.world_size, self.device, self.nnodes = world_size, device, nnodes
        self.per_node = world_size // nnodes
        if nnodes > 1:  # one STRICT_PACK group per node, ranks node-major (verl.single_controller.ray_nodes)
            from verl.single_controller.ray_nodes import node_placement_groups

            self.groups = node_placement_groups(nnodes, self.per_node, device)
        else:
            bundle = {"CPU": 1} if device == "cpu" else {"CPU": 1, "GPU": 1}
            self.groups = [placement_group([bundle] * world_size, strategy="PACK")]
            ray.get(self.groups[0].ready(), timeout=120)
        self.placement_group = self.groups[0]
        self.master_port = _free_port()

    def bundle(self, rank: int) -> tuple[Any, int]:
        """(placement group, bundle index) of ``rank``: node-major, ``per_node`` ranks per group."""
        return self.groups[rank // self.per_node], rank % self.per_node

    def rendezvous(self) -> tuple[str, int]:
        """MASTER_ADDR and a fresh MASTER_PORT for a group on this pool: the rank-0 worker's node."""
        if self.nnodes == 1:
            return "127.0.0.1", _free_port()
        from verl.single_controller.ray_nodes import rendezvous_address

        return rendezvous_address(*self.bundle(0))

    def release(self) -> None:
        """Remove the placement group."""
        from ray.util.placement_group import remove_placement_group

        for group in self.groups:
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 - already gone
                pass


class _WorkerHost:
    """Ray actor body: sets the rank environment, builds the worker, runs its methods."""

    def __init__(self, env: dict[str, str], worker_cls: type, args: tuple, kwargs: dict) -> None:
        os.environ.update(env)
        install_stack_dumper(f"{env.get('VERL_ROLE', 'worker')}_rank{env['RANK']}")
        if env.get("VERL_DEVICE", "cpu") == "cpu":
            import torch

            torch.set_num_threads(max(1, int(env.get("OMP_NUM_THREADS", "1"))))
        self.worker = worker_cls(*args, **kwargs)

    def call(self, name: str, args: tuple, kwargs: dict, by_reference: bool = False) -> Any:
        import ray

        # an argument already in the object store (another group's `call_by_reference` handle, or
        # a `ray.put` reference): every rank fetches it from the store, not through the driver
        args = tuple(ray.get(a) if isinstance(a, ray.ObjectRef) else a for a in args)
        result = getattr(self.worker, name)(*args, **kwargs)
        # by reference: the driver receives a small list holding a reference; the object stays
        # in the store, owned by this process, until the driver and its borrowers drop it
        return [ray.put(result)] if by_reference else result

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> tuple[str, str]:
        """(Ray node id, node IP) of this worker."""
        import ray

        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


class RayWorkerGroup(BaseWorkerGroup):
    """A group of ``world_size`` Ray actors hosting ``worker_cls``.

    Args:
        worker_cls: a `Worker` subclass.
        world_size: number of ranks (processes).
        trainer_cfg: the ``trainer`` section (``device``, ``hang_timeout_s``, ``output_dir``).
        *args, **kwargs: passed to ``worker_cls`` on every rank.
        resource_pool: the `RayResourcePool` to place ranks on (default: a new one).
        role: name used in error messages (default: the worker class name).
        poll_s: seconds between liveness checks while waiting.
    """

    def __init__(
        self,
        worker_cls: type,
        world_size: int,
        trainer_cfg: Any,
        *args: Any,
        role: str | None = None,
        poll_s: float = 1.0,
        resource_pool: RayResourcePool | None = None,
        **kwargs: Any,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        super().__init__(worker_cls, world_size, getattr(trainer_cfg, "hang_timeout_s", None))
        self.role = role or worker_cls.__name__
        self.output_dir = getattr(trainer_cfg, "output_dir", None)
        self.stack_dir = Path(tempfile.mkdtemp(prefix=f"verl_stacks_{self.role}_"))
        self.poll_s = poll_s
        device = getattr(trainer_cfg, "device", "cpu")
        self.pool = resource_pool or RayResourcePool(world_size, device)
        self.placement_group = self.pool.placement_group
        addr, port = self.pool.rendezvous()
        threads = max(1, (os.cpu_count() or 1) // world_size)
        host_cls = ray.remote(_WorkerHost)
        self.actors = []
        for rank in range(world_size):
            group, index = self.pool.bundle(rank)
            env = {
                "RANK": str(rank),
                "WORLD_SIZE": str(world_size),
                "LOCAL_RANK": str(index),
                "MASTER_ADDR": addr,
                "MASTER_PORT": str(port),
                "VERL_DEVICE": device,
                "OMP_NUM_THREADS": str(threads),
                "VERL_ROLE": self.role,
                STACK_DIR_ENV: str(self.stack_dir),
            }
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index)
            actor = host_cls.options(
                scheduling_strategy=strategy,
                num_cpus=0.01,
                num_gpus=0 if device == "cpu" else 0.01,
                max_concurrency=1,
                name=None,
            ).remote(env, worker_cls, args, kwargs)
            self.actors.append(actor)
        self.watch = None
        self._execute("ping", [()] * world_size, [{}] * world_size, list(range(world_size)))
        self.pids = self.worker_pids()  # asked now: a hung worker cannot answer later
        self.nodes = ray.get([a.node.remote() for a in self.actors])
        if self.pool.nnodes > 1:
            from verl.single_controller.ray_nodes import node_watch

            self.watch = node_watch()
            self.watch.register(self.role, self.nodes)

    def _execute(self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]) -> list[Any]:
        refs = [self.actors[r].call.remote(name, per_args[i], per_kwargs[i]) for i, r in enumerate(ranks)]
        return self._wait(refs, ranks, name, call_key(name, per_args))

    def _execute_by_reference(
        self, name: str, per_args: list[tuple], per_kwargs: list[dict], ranks: list[int]
    ) -> list[Any]:
        refs = [self.actors[r].call.remote(name, per_args[i], per_kwargs[i], True) for i, r in enumerate(ranks)]
        return [boxed[0] for boxed in self._wait(refs, ranks, name, call_key(name, per_args))]

    def _wait(self, refs: list[Any], ranks: list[int], name: str, key: str) -> list[Any]:
        import ray

        pending = list(refs)
        deadline = self.deadlines.deadline(key)
        start = time.monotonic()
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=self.poll_s)
            self._check_nodes()
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as e:  # noqa: BLE001 - re-raised with the rank attached
                    rank = ranks[refs.index(ref)]
                    # a dead actor, or a survivor's broken collective: a node loss is named as such
                    self._check_nodes(failed=True)
                    self.shutdown()
                    raise WorkerError(
                        f"{self.role} worker rank {rank} failed in {name}(): {type(e).__name__}: {e}"
                    ) from e
            if pending and deadline is not None and time.monotonic() - start > deadline:
                self._on_hang(name, key, [ranks[refs.index(r)] for r in pending], time.monotonic() - start)
        return ray.get(refs)

    def _check_nodes(self, failed: bool = False) -> None:
        """Multi-node pools: stop the group and raise `NodeLostError` once a hosting node is dead.

        ``failed``: a rank's call just failed; each of the group's nodes whose raylet does not
        answer is given `ACTOR_DEATH_GRACE_S` for Ray to mark it dead (live nodes return at once).
        """
        if self.watch is None:
            return
        lost = self.watch.lost  # the thread polls
        for node_id in dict.fromkeys(n for n, _ in self.nodes) if failed and lost is None else ():
            lost = lost or self.watch.confirm(node_id)
        if lost is not None:
            self.shutdown()
            raise lost

    def _on_driver_node(self, rank: int) -> bool:
        import ray

        nodes = getattr(self, "nodes", None)
        return nodes is None or nodes[rank][0] == ray.get_runtime_context().get_node_id()

    def _on_hang(self, name: str, key: str, pending: list[int], elapsed: float) -> None:
        """Dump every worker's stacks, kill the actors, raise `HangError` (module docstring)."""
        pids = getattr(self, "pids", [])
        workers = [
            (rank, pid, self.stack_dir / f"{self.role}_rank{rank}.txt")
            for rank, pid in enumerate(pids)
            if self._on_driver_node(rank)
        ]  # a pid of another node means nothing here: never signal it
        states = {rank: process_state(pid) for rank, pid, _ in workers}
        stacks = dump_stacks(workers)
        text = format_report(self.role, name, elapsed, self.deadlines.explain(key), pending, workers, states, stacks)
        print(text, file=sys.stderr, flush=True)
        where = "stderr"
        if self.output_dir:
            try:
                Path(self.output_dir).mkdir(parents=True, exist_ok=True)
                (Path(self.output_dir) / "hang_stacks.txt").write_text(text)
                where = str(Path(self.output_dir) / "hang_stacks.txt")
            except OSError:
                pass
        self.shutdown()
        stopped = [r for r, st in states.items() if st == "stopped"]
        raise HangError(
            f"{self.role}.{name}() did not return within {elapsed:.0f} s ({self.deadlines.explain(key)}); "
            f"no answer from rank(s) {pending}"
            + (f"; rank(s) {stopped} were stopped (SIGSTOP)" if stopped else "")
            + f"; every worker's stack is in {where}; the last checkpoint is intact"
        )

    def worker_pids(self) -> list[int]:
        """OS process ids of the ranks (for tests and diagnostics)."""
        import ray

        return ray.get([a.pid.remote() for a in self.actors])

    def shutdown(self) -> None:
        """Kill every actor (the resource pool stays for other groups)."""
        import ray

        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        self.actors = []
        if getattr(self, "watch", None) is not None:
            self.watch.unregister(self.role)
        shutil.rmtree(self.stack_dir, ignore_errors=True)
