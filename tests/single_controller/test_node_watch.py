"""`NodeWatch` against a hand-written Ray node table (no cluster): what it reports and when."""

from __future__ import annotations

import socket
import time

import pytest
import ray

from verl.single_controller.ray_nodes import NodeLostError, NodeWatch


@pytest.fixture
def table(monkeypatch):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    nodes = {
        n: {
            "NodeID": n,
            "Alive": True,
            "NodeManagerAddress": "127.0.0.1",
            "NodeManagerPort": server.getsockname()[1],
            "DeathReasonMessage": "",
        }
        for n in ("aaa", "bbb")
    }
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [dict(v) for v in nodes.values()])
    yield nodes
    server.close()


def _watch() -> NodeWatch:
    watch = NodeWatch(period_s=3600)  # the thread never polls: the test drives poll()
    watch.register("actor_rollout_ref", [("aaa", "10.0.0.1"), ("bbb", "10.0.0.2")])
    watch.register("critic", [("aaa", "10.0.0.1"), ("bbb", "10.0.0.2")])
    return watch


def test_dead_node_is_named_with_its_roles_and_ranks_once(table, capsys):
    watch = _watch()
    assert watch.poll() is None
    watch.check()
    table["bbb"].update(Alive=False, DeathReasonMessage="health check failed")
    lost = watch.poll()
    assert str(lost) == (
        "verl node watch: Ray node bbb (10.0.0.2) is dead (health check failed); it hosted "
        "actor_rollout_ref rank(s) [1], critic rank(s) [1]; stopping the run, the last checkpoint is intact"
    )
    with pytest.raises(NodeLostError, match="Ray node bbb"):
        watch.check()
    watch.poll()
    assert capsys.readouterr().err.count("verl node watch") == 1


def test_node_without_ranks_is_ignored_and_unlisted_node_is_lost(table):
    watch = _watch()
    watch.unregister("actor_rollout_ref")
    watch.unregister("critic")
    table["aaa"]["Alive"] = False
    assert watch.poll() is None  # nothing of this run lives there any more
    watch.register("critic", [("bbb", "10.0.0.2")])
    del table["bbb"]
    assert "not in the node table" in str(watch.poll())


def test_confirm_returns_at_once_for_a_crash_on_a_live_node(table):
    watch = _watch()
    start = time.monotonic()
    assert watch.confirm("aaa", grace_s=30) is None  # alive and its raylet port answers: a plain crash
    assert time.monotonic() - start < 5
    table["aaa"]["Alive"] = False
    assert "Ray node aaa" in str(watch.confirm("aaa", grace_s=30))
