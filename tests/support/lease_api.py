"""An in-memory Lease API with the API server's optimistic concurrency (a PUT with a stale
resourceVersion gets 409), standing in for kube-apiserver in leader_election.py's unit tests
(tests/unit/test_leader_election_lock.py, test_leader_election_elector.py), and a fake clock."""

from __future__ import annotations

import copy
import json
import threading

import kubernetes
from kubernetes.client import ApiException


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class LeaseStore:
    """read/create/replace of one namespace's Leases, as kube-apiserver answers them."""

    def __init__(self) -> None:
        self.leases: dict[str, kubernetes.client.V1Lease] = {}
        self.version = 0
        self.down = False  # the partition: every call fails as a refused connection does
        self.writes: list[tuple[str, str]] = []  # (name, holder) of every accepted write
        self.lock = threading.Lock()

    def _check(self) -> None:
        if self.down:
            raise ConnectionRefusedError("connection refused")  # not an ApiException, as urllib3's are not

    def read_namespaced_lease(self, name, namespace, **_):
        self._check()
        with self.lock:
            if name not in self.leases:
                raise _not_found(name)
            return copy.deepcopy(self.leases[name])

    def create_namespaced_lease(self, namespace, body, **_):
        self._check()
        with self.lock:
            name = body.metadata["name"] if isinstance(body.metadata, dict) else body.metadata.name
            if name in self.leases:
                raise ApiException(status=409, reason="AlreadyExists")
            return self._store(name, body)

    def replace_namespaced_lease(self, name, namespace, body, **_):
        self._check()
        with self.lock:
            if self.leases[name].metadata.resource_version != body.metadata.resource_version:
                raise ApiException(status=409, reason="Conflict")
            return self._store(name, body)

    def _store(self, name, body):
        self.version += 1
        stored = copy.deepcopy(body)
        stored.metadata = kubernetes.client.V1ObjectMeta(name=name, resource_version=str(self.version))
        self.leases[name] = stored
        self.writes.append((name, stored.spec.holder_identity))
        return copy.deepcopy(stored)

    def holder(self, name: str = "tritonscale") -> str | None:
        with self.lock:
            lease = self.leases.get(name)
            return lease.spec.holder_identity if lease else None


def _not_found(name: str) -> ApiException:
    exc = ApiException(status=404, reason="Not Found")
    # The port reads the code from the body, as the API server sends it.
    exc.body = json.dumps({"kind": "Status", "code": 404, "message": f'leases "{name}" not found'})
    return exc
