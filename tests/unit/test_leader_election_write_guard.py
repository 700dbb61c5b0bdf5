"""The write guard of the operator's client (kube/client.py) that leader election sets: a write is
refused before any request once the replica may not act, and a stop waits for the writes in flight."""

from __future__ import annotations

import threading

import kubernetes
import pytest

from tritonscale.kube import client as kube_client
from tritonscale.leader_election import NotLeader

# ---- the write guard of the operator's client -------------------------------------------------

def test_writes_check_the_guard_and_in_flight_writes_are_awaited():
    kube = kube_client.Kube(kubernetes.client.ApiClient())
    started, finish = threading.Event(), threading.Event()

    def slow_patch(name, namespace, body, **_):
        started.set()
        finish.wait(5)
        return {"metadata": {"name": name}}, 200, {}  # a *_with_http_info call's (object, status, headers)

    kube._kinds["ConfigMap"] = kube_client._Kind(read=None, create=None, patch=slow_patch)
    try:
        writer = threading.Thread(target=kube.patch, args=("ConfigMap", "ns", "c", {}), daemon=True)
        writer.start()
        assert started.wait(2)

        def refuse() -> None:
            raise NotLeader("standby")

        kube_client.set_write_guard(refuse)
        with pytest.raises(NotLeader):
            kube.patch("ConfigMap", "ns", "c", {})  # refused before any request
        assert kube_client.wait_for_writes(0.2) is False  # the first write is still in flight
        finish.set()
        assert kube_client.wait_for_writes(2) is True
        writer.join(2)
    finally:
        kube_client.set_write_guard(lambda: None)


def test_writes_together_are_admitted_once_and_awaited_as_one():
    """A tick's status and replica count (kube.client.writes_together): the guard checked at the block's
    start only, and a stop waits for the whole block, not the write in flight."""
    kube = kube_client.Kube(kubernetes.client.ApiClient())
    kube._kinds["ConfigMap"] = kube_client._Kind(read=None, create=None,
                                                 patch=lambda name, namespace, body, **_: ({}, 200, {}))
    between, go_on, second = threading.Event(), threading.Event(), []

    def tick() -> None:
        with kube_client.writes_together():
            kube.patch("ConfigMap", "ns", "status", {})
            between.set()
            go_on.wait(5)
            try:
                kube.patch("ConfigMap", "ns", "count", {})
                second.append("written")
            except NotLeader:
                second.append("refused")

    def refuse() -> None:
        raise NotLeader("stopping")

    try:
        writer = threading.Thread(target=tick, daemon=True)
        writer.start()
        assert between.wait(2)
        kube_client.set_write_guard(refuse)  # SIGTERM between the block's two writes
        with pytest.raises(NotLeader):
            kube.patch("ConfigMap", "ns", "c", {})  # another thread's write: refused
        assert kube_client.wait_for_writes(0.2) is False  # the block is still in flight
        go_on.set()
        assert kube_client.wait_for_writes(2) is True
        writer.join(2)
        assert second == ["written"]
        with pytest.raises(NotLeader), kube_client.writes_together():
            pass  # refused at the start: nothing in the block is written
    finally:
        kube_client.set_write_guard(lambda: None)
