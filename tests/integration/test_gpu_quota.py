"""A namespace's ResourceQuota on nvidia.com/gpu (a team's share of a shared GPU cluster), on the real
control plane: the ReplicaSet may not create the pods past it, so none is Pending and the scheduler
says nothing. The Deployment's ReplicaFailure condition does, and the operator reads it: Schedulable=False
(PodsNotCreated) and the Ready condition quote the quota, and the autoscaler asks for no more.

Pods become Ready through tests/pod_ready_marker.py (a test stand-in for a kubelet: nothing runs).
"""

from __future__ import annotations

import kubernetes

from support.cluster import condition, pod_ready, pod_unschedulable, sample, service_pods, tuner_change, wait_for
from support.deployment_watch import needs_prometheus
from support.overload import overloaded, replicas_asked_as_load_triples
from tritonscale.api.spec import GROUP, HASH_ANNOTATION, PLURAL, VERSION

NAME = "linear"


def _gpu_quota(core: kubernetes.client.CoreV1Api, ns: str, gpus: int) -> None:
    """A ResourceQuota "gpus" of ``gpus`` nvidia.com/gpu in ``ns``, enforced once this returns."""
    core.create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                               "metadata": {"name": "gpus"},
                                               "spec": {"hard": {"requests.nvidia.com/gpu": str(gpus)}}})
    wait_for(lambda: (core.read_namespaced_resource_quota("gpus", ns).status.hard or {}), 10,
             what="the quota's status (enforced from then on)")


def _two_replicas_of_one_gpu(custom: kubernetes.client.CustomObjectsApi, core: kubernetes.client.CoreV1Api, ns: str,
                             **batching: object) -> None:
    """The sample at two replicas of one GPU each (``batching``: spec.batching fields), once both are ready:
    the quota of two is full."""
    body = sample(ns)
    body["spec"]["runtime"]["gpus"] = 1
    body["spec"]["batching"] = {**body["spec"].get("batching", {}), **batching}
    body["spec"]["scaling"].update({"minReplicas": 2, "maxReplicas": 2, "targetP95Milliseconds": 100})
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    wait_for(lambda: sum(map(pod_ready, service_pods(core, ns, NAME))) == 2, 30, what="the warm floor of 2 ready pods")


@needs_prometheus
def test_scaling_beyond_a_gpu_quota_says_so_and_stops_asking(api_client, namespace, models_claim, node,
                                                            start_operator, tmp_path):
    """A namespace's ResourceQuota on nvidia.com/gpu (a multi-tenant cluster's share per team) refuses the
    pods past it: the ReplicaSet cannot create them, so no pod is Pending and the scheduler says nothing.
    The Deployment's ReplicaFailure condition does. Without it read, status said Schedulable=True ("none of
    the 2 pods is unschedulable") and the decider counted the replicas never created as starting
    ("WaitingForWarmup"), asking for more as the load rose. Now Schedulable=False (PodsNotCreated) quotes
    the quota, and the autoscaler asks for no more, as for pods the scheduler cannot place."""
    ns = namespace
    core, apps = kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    node(gpus=8)  # the node has room: the quota is what refuses
    _gpu_quota(core, ns, 2)
    with overloaded(tmp_path / "prom", api_client, ns, NAME, start_operator, "the quota's two GPUs") as (exporter, op,
                                                                                                     cond):
        assert cond["reason"] == "PodsNotCreated", cond
        assert "exceeded quota: gpus" in cond["message"], cond["message"]
        pods = [p for p in service_pods(core, ns, NAME) if not p.metadata.deletion_timestamp]
        assert len(pods) == 2 and not any(map(pod_unschedulable, pods)), \
            [(p.metadata.name, p.status.phase) for p in pods]

        # The load triples: the decider asks for no more than it asked before it read the refusal.
        asked = apps.read_namespaced_deployment(NAME, ns).spec.replicas
        seen = replicas_asked_as_load_triples(exporter, api_client, ns, NAME)
        scaling = condition(custom, ns, NAME, "Scaling")
        print(f"replicas asked while the quota refused pods: first {asked}, then {sorted(set(seen))}; "
              f"Scaling: {scaling.get('reason')}: {scaling.get('message', '')[-200:]}")
        assert max(seen) <= asked < 8, f"the autoscaler kept asking for more: {asked} -> {max(seen)}"
        assert condition(custom, ns, NAME, "Schedulable")["status"] == "False"

        # The quota raised: the pods come, and Schedulable is True again.
        core.patch_namespaced_resource_quota("gpus", ns, {"spec": {"hard": {"requests.nvidia.com/gpu": "8"}}})
        wait_for(lambda: condition(custom, ns, NAME, "Schedulable").get("status") == "True", 60,
                 what="Schedulable=True once the quota allows the pods")
        assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]


def test_a_rollout_a_full_gpu_quota_refuses_says_so_before_its_deadline(api_client, namespace, models_claim, node,
                                                                         start_operator):
    """A spec edit under a quota on nvidia.com/gpu that the running pods fill: the rollout's surge pod is
    refused, and the rollout waits until its progress deadline (600 s by default) says RolloutStuck. Ready
    (RollingOut) and Schedulable (PodsNotCreated) quote the quota meanwhile; the old pods keep serving. Once
    the quota allows the surge pod, the rollout goes through."""
    ns = namespace
    core = kubernetes.client.CoreV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    node(gpus=8)
    _gpu_quota(core, ns, 2)
    op = start_operator()
    _two_replicas_of_one_gpu(custom, core, ns)
    custom.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME,
                                          {"spec": {"batching": {"maxQueueDelayMicroseconds": 500}}},
                                          _content_type="application/merge-patch+json")
    ready = wait_for(lambda: (c := condition(custom, ns, NAME, "Ready")).get("reason") == "RollingOut"
                     and "cannot be created" in c.get("message", "") and c, 30,
                     what="Ready=Unknown RollingOut naming the refused pods")
    sched = wait_for(lambda: (c := condition(custom, ns, NAME, "Schedulable")).get("reason") == "PodsNotCreated" and c,
                     30, what="Schedulable=False PodsNotCreated")
    print(f"\nReady: {ready['message']}\nSchedulable: {sched['message']}")
    assert "exceeded quota: gpus" in ready["message"] and "exceeded quota: gpus" in sched["message"]
    assert sum(map(pod_ready, service_pods(core, ns, NAME))) == 2, "the old pods keep serving"

    core.patch_namespaced_resource_quota("gpus", ns, {"spec": {"hard": {"requests.nvidia.com/gpu": "3"}}})
    wait_for(lambda: condition(custom, ns, NAME, "Ready").get("reason") == "ReplicasReady", 90,
             what="the rollout through once the quota allows its surge pod")
    wait_for(lambda: condition(custom, ns, NAME, "Schedulable").get("status") == "True", 30,
             what="Schedulable=True once the pods are created")
    assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]


def test_a_tuner_change_a_full_gpu_quota_refuses_goes_back_at_once(api_client, namespace, models_claim, node,
                                                                   start_operator):
    """The tuner's change (the test acts as the tuner, as in test_rollout_and_capacity.py) under a quota the
    running pods fill: its ReplicaSet may create none of the new pods, so the rollout can never go on. The
    operator's own tuner goes back to the settings the pods serve at once (RolloutStuck), not after the
    Deployment's ten-minute progress deadline, and the Deployment is back on the earlier template."""
    ns = namespace
    core, apps = kubernetes.client.CoreV1Api(api_client), kubernetes.client.AppsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    node(gpus=8)
    _gpu_quota(core, ns, 2)
    op = start_operator()
    _two_replicas_of_one_gpu(custom, core, ns, enabled=True, maxQueueDelayMicroseconds=2_000, preferredBatchSizes=[],
                             autoTune={"enabled": True})
    old_hash = apps.read_namespaced_deployment(NAME, ns).spec.template.metadata.annotations[HASH_ANNOTATION]
    tuned = tuner_change(500, 2_000, "MoreCapacity")
    custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, NAME, {"status": {"batching": tuned}})
    wait_for(lambda: apps.read_namespaced_deployment(NAME, ns).spec.template.metadata.annotations[HASH_ANNOTATION]
             != old_hash, 20, what="the change's template")

    batching = wait_for(lambda: (b := (custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME)
                                       .get("status") or {}).get("batching") or {}).get("reason") == "RolloutStuck"
                        and b, 60, what="the tuner going back (RolloutStuck)")
    print(f"\nstatus.batching: {batching.get('reason')}: {batching.get('message')}")
    assert batching["maxQueueDelayMicroseconds"] == 2_000 and "a full quota" in batching["message"], batching
    wait_for(lambda: apps.read_namespaced_deployment(NAME, ns).spec.template.metadata.annotations[HASH_ANNOTATION]
             == old_hash, 30, what="the Deployment back on the earlier template")
    wait_for(lambda: condition(custom, ns, NAME, "Ready").get("reason") == "ReplicasReady", 60,
             what="Ready again on the pods that kept serving")
    assert sum(map(pod_ready, service_pods(core, ns, NAME))) == 2
    assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]
