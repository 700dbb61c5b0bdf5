"""``runtime.topologySpreadConstraints`` and ``runtime.affinity`` reach the real scheduler: the warm floor is
spread across nodes as the spec asks, against the real control plane and the real operator process (a
stand-in kubelet per Node marks the pods Ready; nothing runs).

Each fleet also prefers one node (preferred node affinity, weight 100; that node is also the larger one), which
on its own draws every pod there: the control case shows it, so the spread case can fail."""

from __future__ import annotations

import time
from collections import Counter

import kubernetes

from support.cluster import condition, sample, wait_for
from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION

FLOOR = 3
SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}


def _prefer(node: str) -> dict:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


def _fleet(ns: str, name: str, runtime: dict) -> dict:
    body = sample(ns)
    body["metadata"]["name"] = name
    body["spec"]["model"]["name"] = "linear"
    body["spec"]["scaling"].update({"minReplicas": FLOOR, "maxReplicas": FLOOR})
    body["spec"]["runtime"].update(runtime)
    return body


def test_the_warm_floor_is_spread_as_the_spec_asks(api_client, namespace, models_claim, node, start_operator):
    ns = namespace
    core, apps = kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    # a has 4x b's room, so the pull of the scheduler's least-allocated scoring toward the emptier b is small
    a, b = node(capacity={"cpu": "64", "memory": "256Gi"}).node, node().node

    def placement(name: str) -> Counter:
        pods = core.list_namespaced_pod(ns, label_selector=f"{LABEL}={name}").items
        return Counter(p.spec.node_name for p in pods if not p.metadata.deletion_timestamp)

    def ready(name: str) -> bool:
        d = apps.read_namespaced_deployment(name, ns)
        return (d.status.ready_replicas or 0) == FLOOR and sum(placement(name).values()) == FLOOR

    start_operator()
    # The control: the preference alone puts the whole floor on node a.
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _fleet(ns, "packed", {"affinity": _prefer(a)}))
    wait_for(lambda: ready("packed"), 60, what="the packed fleet's floor ready")
    assert placement("packed") == Counter({a: FLOOR}), placement("packed")

    # The same preference and a constraint without labelSelector: the operator gives it the fleet's own, so
    # the scheduler counts the fleet's pods per node and keeps them within one of each other.
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, _fleet(
        ns, "spread", {"affinity": _prefer(a), "topologySpreadConstraints": [SPREAD]}))
    wait_for(lambda: ready("spread"), 60, what="the spread fleet's floor ready")
    assert placement("spread") == Counter({a: 2, b: 1}), placement("spread")
    pod_spec = apps.read_namespaced_deployment("spread", ns).spec.template.spec
    assert pod_spec.topology_spread_constraints[0].label_selector.match_labels == {LABEL: "spread"}

    # Taking the constraint out of the spec takes it out of the pod template (and rolls the pods).
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "spread",
                                          {"spec": {"runtime": {"topologySpreadConstraints": None}}},
                                          _content_type="application/merge-patch+json")
    wait_for(lambda: not apps.read_namespaced_deployment("spread", ns).spec.template.spec.topology_spread_constraints,
             30, what="the pod template without topologySpreadConstraints")
    assert apps.read_namespaced_deployment("spread", ns).spec.template.spec.affinity.node_affinity is not None


def test_a_mig_slice_fleet_runs_on_the_slices_the_node_advertises(api_client, namespace, models_claim, node,
                                                                   start_operator):
    """runtime.gpuResource: a node that advertises only MIG slices (the device plugin's mixed strategy) takes
    a fleet that counts them, and the Triton config runs the model on the GPU it sees."""
    ns = namespace
    core, custom = kubernetes.client.CoreV1Api(api_client), kubernetes.client.CustomObjectsApi(api_client)
    mig = "nvidia.com/mig-1g.10gb"
    sliced = node(capacity={mig: "2"}).node
    start_operator()
    body = _fleet(ns, "sliced", {"gpus": 1, "gpuResource": mig})
    body["spec"]["scaling"].update({"minReplicas": 2, "maxReplicas": 2})
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    def pods() -> list:
        return [p for p in core.list_namespaced_pod(ns, label_selector=f"{LABEL}=sliced").items
                if not p.metadata.deletion_timestamp]

    wait_for(lambda: len(pods()) == 2 and all(p.spec.node_name == sliced for p in pods()), 60,
             what="both replicas bound to the node's MIG slices")
    limits = pods()[0].spec.containers[0].resources.limits
    assert limits[mig] == "1" and "nvidia.com/gpu" not in limits, limits
    config = core.list_namespaced_config_map(ns, label_selector=f"{LABEL}=sliced").items[0].data["config.pbtxt"]
    assert "KIND_GPU" in config, config


def test_one_pod_per_node_holds_the_floor_and_a_rollout_waits_for_a_free_node(api_client, namespace, models_claim,
                                                                              node, start_operator):
    """runtime.affinity with a required anti-affinity of one pod per node: the floor of 2 takes both nodes, a
    rollout's surge pod has nowhere to go and waits Pending while both old pods keep serving (the README's
    warning), and a third node lets the rollout finish."""
    ns = namespace
    core, apps = kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    node(), node()
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {LABEL: "apart"}}}]}}
    start_operator()
    body = _fleet(ns, "apart", {"affinity": anti})
    body["spec"]["scaling"].update({"minReplicas": 2, "maxReplicas": 2})
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    def pods() -> list:
        return [p for p in core.list_namespaced_pod(ns, label_selector=f"{LABEL}=apart").items
                if not p.metadata.deletion_timestamp]

    def ready(p) -> bool:
        return any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])

    wait_for(lambda: len(pods()) == 2 and all(map(ready, pods())), 60, what="the floor of 2 ready")
    assert len({p.spec.node_name for p in pods()}) == 2
    old = {p.metadata.uid for p in pods()}

    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "apart",
                                          {"spec": {"runtime": {"podAnnotations": {"example.com/rev": "2"}}}},
                                          _content_type="application/merge-patch+json")
    surge = wait_for(lambda: [p for p in pods() if p.metadata.uid not in old and any(
        c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or [])], 30,
        what="the surge pod Unschedulable")
    assert len(surge) == 1
    for _ in range(10):  # the rollout waits, and the old pods keep the floor
        assert {p.metadata.uid for p in pods() if ready(p)} == old
        time.sleep(0.5)

    cond = wait_for(lambda: (c := condition(custom, ns, "apart", "Schedulable")).get("status") == "False" and c, 30,
                    what="Schedulable=False")
    assert cond["reason"] == "Unschedulable" and "anti-affinity" in cond["message"], cond  # the scheduler's why

    node()
    wait_for(lambda: len(pods()) == 2 and all(map(ready, pods())) and not old & {p.metadata.uid for p in pods()},
             90, what="the rollout finished on the third node's room")
    # the Deployment's status follows the pods' (it counted a terminating old pod as ready for a moment: 2, 3)
    wait_for(lambda: ((d := apps.read_namespaced_deployment("apart", ns).status).updated_replicas,
                      d.ready_replicas) == (2, 2), 30, what="the Deployment's status at 2 updated, 2 ready")
