"""A test-only stand-in for a kubelet that runs nothing: it registers one Node and
marks the pods the scheduler binds to it Running and Ready through the pods/status
subresource.

Only what the controllers under test read is written: the Node (capacity, a
Ready condition, posted again if the node lifecycle controller marked it Unknown,
and its Lease renewed as a kubelet renews it, so the node lifecycle controller
keeps it schedulable), Pod status (phase, conditions,
containerStatuses), and the final deletion of terminating pods (a kubelet
deletes a pod with grace period 0 once its containers stopped; here at once).
The sandbox's real kubelet stand-in, which runs tritonserver, is elsewhere.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import urllib3
from kubernetes.client import ApiException

from support.cluster import delete_if_present

STRATEGIC = "application/strategic-merge-patch+json"
LEASE_RENEW_S = 10.0  # a kubelet renews every 10 s (a quarter of its 40 s lease)


def _now(micro: bool = False) -> str:
    t = datetime.datetime.now(datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


class PodReadyMarker(threading.Thread):
    """Register Node ``node`` with ``capacity`` and mark its pods Ready ``ready_after_s``
    after they were bound (a stand-in for image pull, Triton start and warmup). ``ready_after_s``
    may be a function of the pod (the API's V1Pod), for pods that warm up slower than others; it
    is asked again at each pass, so its answer may change while the pod waits."""

    def __init__(self, api_client: kubernetes.client.ApiClient, node: str, *, gpus: int = 0,
                 ready_after_s: float | Callable[[Any], float] = 0.5, capacity: dict[str, str] | None = None):
        super().__init__(daemon=True, name=f"pod-ready-marker-{node}")
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.leases = kubernetes.client.CoordinationV1Api(api_client)
        self.node, self.ready_after_s = node, ready_after_s
        self.capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", **(capacity or {})}
        if gpus:
            self.capacity["nvidia.com/gpu"] = str(gpus)
        self.stop_flag = threading.Event()
        self.bound_at: dict[str, float] = {}  # pod uid -> when first seen bound here
        self.marked: set[str] = set()
        self.errors: list[str] = []
        self.ready_reposted = 0  # times the Node's Ready condition was posted again (after an outage)

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> PodReadyMarker:
        self._register()
        self._renew_lease()
        # TaintNodesByCondition admission taints a new Node not-ready:NoSchedule; the
        # node lifecycle controller lifts it once it sees the Ready condition.
        deadline = time.monotonic() + 60
        while any(t.effect == "NoSchedule" for t in self.core.read_node(self.node).spec.taints or []):
            if time.monotonic() > deadline:
                raise AssertionError(f"Node {self.node} still tainted: {self.core.read_node(self.node).spec.taints}")
            time.sleep(0.2)
        super().start()
        return self

    def stop(self) -> None:
        self.stop_flag.set()
        if self.is_alive():
            self.join(10)
        delete_if_present(self.core.delete_node, self.node)
        delete_if_present(self.leases.delete_namespaced_lease, self.node, "kube-node-lease")

    def run(self) -> None:
        renewed = time.monotonic()
        while not self.stop_flag.is_set():
            try:
                if time.monotonic() - renewed >= LEASE_RENEW_S:
                    self._renew_lease()
                    self._post_ready_if_lost()
                    renewed = time.monotonic()
                self._sync_pods()
            except ApiException as exc:  # recorded, and the loop goes on as a kubelet's would
                self.errors.append(f"{exc.status} {exc.reason}")
            except (urllib3.exceptions.HTTPError, OSError) as exc:  # the API server away: the same
                self.errors.append(type(exc).__name__)
            self.stop_flag.wait(0.1)

    # ---- the Node ----------------------------------------------------------------------

    @staticmethod
    def _ready_condition() -> dict[str, str]:
        now = _now()
        return {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test stand-in: nothing runs",
                "lastHeartbeatTime": now, "lastTransitionTime": now}

    def _register(self) -> None:
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node,
                                                       "kubernetes.io/os": "linux"}},
            "status": {
                "capacity": self.capacity, "allocatable": self.capacity,
                "conditions": [self._ready_condition()],
            },
        }
        self.core.create_node(node)  # Nodes keep the status they are created with

    def _renew_lease(self) -> None:
        body = {"metadata": {"name": self.node, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": self.node, "leaseDurationSeconds": 40, "renewTime": _now(micro=True)}}
        try:
            self.leases.patch_namespaced_lease(self.node, "kube-node-lease", {"spec": body["spec"]})
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.leases.create_namespaced_lease("kube-node-lease", body)

    def _post_ready_if_lost(self) -> None:
        """Post Ready=True again when the Node's Ready condition is not True, as a kubelet's
        status update does (it posts whenever its status differs from the server's). The node
        lifecycle controller sets Ready=Unknown, and taints the Node unreachable (NoSchedule),
        when the Lease went unrenewed past its grace period -- an API server outage longer than
        the 40 s lease does that -- and only the kubelet's status puts it back."""
        node = self.core.read_node(self.node)
        ready = next((c for c in node.status.conditions or [] if c.type == "Ready"), None)
        if ready is not None and ready.status == "True":
            return
        self.core.patch_node_status(self.node, {"status": {"conditions": [self._ready_condition()]}},
                                    _content_type=STRATEGIC)
        self.ready_reposted += 1

    # ---- its pods ----------------------------------------------------------------------

    def _sync_pods(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        for pod in pods:
            uid, ns, name = pod.metadata.uid, pod.metadata.namespace, pod.metadata.name
            if pod.metadata.deletion_timestamp:
                try:
                    self.core.delete_namespaced_pod(name, ns, grace_period_seconds=0,
                                                    body=kubernetes.client.V1DeleteOptions(
                                                        grace_period_seconds=0,
                                                        preconditions={"uid": uid}))
                except ApiException as exc:
                    if exc.status not in (404, 409):
                        raise
                continue
            first = self.bound_at.setdefault(uid, time.monotonic())
            if uid in self.marked or time.monotonic() - first < self._warmup_s(pod):
                continue
            self._mark_ready(pod)
            self.marked.add(uid)

    def _warmup_s(self, pod: Any) -> float:
        return float(self.ready_after_s(pod) if callable(self.ready_after_s) else self.ready_after_s)

    def _mark_ready(self, pod: Any) -> None:
        now = _now()
        conditions = [{"type": t, "status": "True", "lastTransitionTime": now}
                      for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")]
        status = {
            "phase": "Running", "startTime": now, "hostIP": "127.0.0.1",
            "conditions": conditions,
            "containerStatuses": [{"name": c.name, "image": c.image, "imageID": "", "ready": True, "started": True,
                                   "restartCount": 0, "state": {"running": {"startedAt": now}}}
                                  for c in pod.spec.containers],
        }
        try:
            self.core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status},
                                                  _content_type=STRATEGIC)
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile
                raise


def bind_models_claim(api_client: kubernetes.client.ApiClient, namespace: str, claim: str = "models") -> str:
    """A PersistentVolumeClaim ``claim`` in ``namespace``, pre-bound to a hostPath
    PersistentVolume, so pods of samples with ``storageUri: pvc://models/...``
    are schedulable (an unbound claim keeps them Pending). Returns the PV's name, which
    the caller deletes (Retain: a hostPath volume has no deleter)."""
    core = kubernetes.client.CoreV1Api(api_client)
    pv_name = f"{claim}-{namespace}"
    core.create_persistent_volume({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": f"/tmp/tritonscale-test-models/{namespace}"},
                 "claimRef": {"namespace": namespace, "name": claim}},
    })
    core.create_namespaced_persistent_volume_claim(namespace, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": pv_name,
                 "resources": {"requests": {"storage": "1Gi"}}},
    })
    # Wait for the PV controller to mark the pair Bound: the scheduler refuses pods whose claim
    # is not Bound yet ("unbound immediate PersistentVolumeClaims") and retries only after a
    # backoff, so a test that starts before the binding would wait that out. It mostly comes
    # with the controller's periodic resync (--pvclaimbinder-sync-period, 15 s): its volume and
    # claim workers both set the volume's phase, the claim's loses with a conflict ("Could not
    # sync claim" at -v=5) and is not retried before then. 0.1-15 s measured for a pre-bound
    # pair, whichever is created first.
    deadline = time.monotonic() + 60
    while core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase != "Bound":
        if time.monotonic() > deadline:
            events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={claim}").items
            raise AssertionError(f"claim {namespace}/{claim} not Bound to {pv_name} after 60 s; its events: "
                                 + ("; ".join(f"{e.reason}: {e.message}" for e in events) or "none"))
        time.sleep(0.1)
    return pv_name
