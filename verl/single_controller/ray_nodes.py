"""More than one node: per-node placement groups and the node-loss watch of a Ray run.

Placement (``trainer.nnodes = N`` > 1, ``trainer.n_gpus_per_node = n``): the pool is N placement
groups of n bundles each (``{"CPU": 1}``, + ``{"GPU": 1}`` on CUDA), every group ``STRICT_PACK``
(all of a node's ranks on one node, as verl's ``RayResourcePool`` does), each aimed at its own
alive node (``_soft_target_node_id``; the driver's node first, then by IP and node id) and
checked after placement to sit on N distinct nodes. Ranks are node-major: rank ``r`` is bundle
``r % n`` of group ``r // n``; torch.distributed meets at the rank-0 worker's node IP.

Node loss (`NodeWatch`): a daemon thread reads Ray's node table (``ray.nodes()``, GCS) every
`WATCH_PERIOD_S` seconds; a node that hosts ranks and is no longer alive is reported at once on
stderr in one line naming the node (id, IP), Ray's death reason, and the roles and ranks it
hosted, and the next wait of any worker group raises `NodeLostError` with that line. A failed
call of a multi-node group (the dead rank's ``ActorDiedError``, or a survivor's broken gloo /
NCCL collective, whichever comes first) first gives each of the group's nodes whose raylet does
not answer up to `ACTOR_DEATH_GRACE_S` seconds to be marked dead, so a node loss is named as
such rather than as one rank's crash. Ray's GCS marks a killed node dead after its health checks
fail (about 15 s with Ray's defaults; 13-14 s measured here), so the run stops well within 60 s.
Checkpoints are published atomically (`verl.run.checkpoint`): the last complete one stays intact.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

WATCH_PERIOD_S = 2.0
ACTOR_DEATH_GRACE_S = 40.0


class NodeLostError(RuntimeError):
    """A Ray node hosting worker ranks died; the message names the node, its roles and ranks."""


def alive_nodes() -> list[dict[str, Any]]:
    """Ray's alive nodes, the driver's node first, then by (IP, node id)."""
    import ray

    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return sorted(nodes, key=lambda n: (n["NodeID"] != here, n["NodeManagerAddress"], n["NodeID"]))


def node_placement_groups(nnodes: int, per_node: int, device: str, timeout_s: float = 120.0) -> list[Any]:
    """``nnodes`` STRICT_PACK placement groups of ``per_node`` bundles, each on its own node.

    Raises:
        ConfigError: the cluster has fewer than ``nnodes`` alive nodes with ``per_node`` free
            slots, or the groups did not land on distinct nodes.
    """
    import ray
    from ray.util.placement_group import (
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

    from verl.config import ConfigError

    res = "GPU" if device == "cuda" else "CPU"
    fits = [n for n in alive_nodes() if n.get("Resources", {}).get(res, 0) >= per_node]
    if len(fits) < nnodes:
        raise ConfigError(
            f"trainer.nnodes={nnodes}: the Ray cluster has {len(fits)} alive node(s) with "
            f"{per_node} {res} (trainer.n_gpus_per_node); start more nodes with `ray start --address`"
        )
    bundle = {"CPU": 1} if device == "cpu" else {"CPU": 1, "GPU": 1}
    groups = [
        placement_group([bundle] * per_node, strategy="STRICT_PACK", _soft_target_node_id=n["NodeID"])
        for n in fits[:nnodes]
    ]
    ray.get([g.ready() for g in groups], timeout=timeout_s)
    hosts = [placement_group_table(g)["bundles_to_node_id"][0] for g in groups]
    if len(set(hosts)) < nnodes:
        for g in groups:
            remove_placement_group(g)
        raise ConfigError(
            f"trainer.nnodes={nnodes}: the placement groups landed on {len(set(hosts))} node(s); "
            f"each node needs {per_node} free {res} slots"
        )
    return groups


def _probe_address() -> tuple[str, int]:
    """(node IP, a free TCP port) where this task runs: the rendezvous of the rank-0 worker."""
    import socket

    import ray

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return ray.util.get_node_ip_address(), s.getsockname()[1]


def rendezvous_address(group: Any, bundle_index: int) -> tuple[str, int]:
    """MASTER_ADDR / MASTER_PORT on the node of ``group``'s bundle ``bundle_index`` (rank 0's)."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=bundle_index)
    probe = ray.remote(_probe_address).options(scheduling_strategy=strategy, num_cpus=0.01)
    return ray.get(probe.remote(), timeout=120)


class NodeWatch:
    """Which node hosts which role's ranks, and a thread that notices a node's death (module docstring)."""

    def __init__(self, period_s: float = WATCH_PERIOD_S) -> None:
        self.period_s = period_s
        self.hosted: dict[str, dict[str, Any]] = {}  # node id -> {"ip": str, "roles": {role: [ranks]}}
        self.lost: NodeLostError | None = None
        self.lost_at: float | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def register(self, role: str, placements: list[tuple[str, str]]) -> None:
        """Record ``role``'s ranks: ``placements[rank] = (node id, node IP)``; starts the thread."""
        with self._lock:
            for rank, (node_id, ip) in enumerate(placements):
                entry = self.hosted.setdefault(node_id, {"ip": ip, "roles": {}})
                entry["roles"].setdefault(role, []).append(rank)
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="verl-node-watch", daemon=True)
            self._thread.start()

    def unregister(self, role: str) -> None:
        """Forget ``role``'s ranks (its group was shut down)."""
        with self._lock:
            for entry in self.hosted.values():
                entry["roles"].pop(role, None)

    def poll(self) -> NodeLostError | None:
        """Read the node table once; return (and remember) the loss of a node hosting ranks."""
        import ray

        if self.lost is not None or not ray.is_initialized():
            return self.lost
        table = {n["NodeID"]: n for n in ray.nodes()}
        with self._lock:
            for node_id, entry in self.hosted.items():
                node = table.get(node_id, {})
                if entry["roles"] and not node.get("Alive", False):
                    self._mark_lost(node_id, entry, node.get("DeathReasonMessage") or "not in the node table")
                    break
        return self.lost

    def _mark_lost(self, node_id: str, entry: dict[str, Any], reason: str) -> None:
        roles = ", ".join(f"{role} rank(s) {ranks}" for role, ranks in sorted(entry["roles"].items()))
        line = (
            f"verl node watch: Ray node {node_id} ({entry['ip']}) is dead ({reason}); it hosted {roles}; "
            "stopping the run, the last checkpoint is intact"
        )
        self.lost, self.lost_at = NodeLostError(line), time.monotonic()
        print(line, file=sys.stderr, flush=True)

    def check(self) -> None:
        """Raise `NodeLostError` when a hosting node was found dead."""
        if self.lost is not None:
            raise self.lost

    def confirm(self, node_id: str, grace_s: float = ACTOR_DEATH_GRACE_S) -> NodeLostError | None:
        """After an actor on ``node_id`` died: wait up to ``grace_s`` s for Ray to mark that node dead."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            lost = self.poll()
            if lost is not None or not self._node_gone_possible(node_id):
                return lost
            time.sleep(0.5)
        return self.lost

    def _node_gone_possible(self, node_id: str) -> bool:
        """False once Ray confirms the node alive and its raylet answering (a plain crash)."""
        import ray

        node = next((n for n in ray.nodes() if n["NodeID"] == node_id), None)
        return node is None or not node.get("Alive") or _raylet_unreachable(node)

    def _loop(self) -> None:
        while self.lost is None:
            time.sleep(self.period_s)
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - Ray shut down under the thread
                return


def _raylet_unreachable(node: dict[str, Any]) -> bool:
    """Whether the node's raylet refuses a TCP connection (it died; GCS has not noticed yet)."""
    import socket

    try:
        with socket.create_connection((node["NodeManagerAddress"], node["NodeManagerPort"]), timeout=1.0):
            return False
    except OSError:
        return True


_WATCH: NodeWatch | None = None


def node_watch() -> NodeWatch:
    """The driver's one `NodeWatch` (shared by every multi-node worker group)."""
    global _WATCH
    if _WATCH is None:
        _WATCH = NodeWatch()
    return _WATCH
