"""``runtime.priorityClassName`` against the real control plane: a fleet whose PriorityClass is above the
cluster's batch work gets the GPU a lower-priority pod holds, by the real scheduler's preemption; a
PriorityClass that does not exist yet leaves the pods uncreated and Ready says why (a stand-in kubelet
marks the pods Ready; nothing runs).

The batch pod's own class is above the default priority (0), so a fleet whose pods were rendered without
the field could not preempt it: the test fails if the field does not reach the pods."""

from __future__ import annotations

import uuid

import kubernetes
from kubernetes.client import ApiException

from support.cluster import condition, sample, wait_for
from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION


def test_a_serving_priority_preempts_batch_work_for_the_gpu(api_client, namespace, models_claim, node, start_operator):
    ns = namespace
    core, custom = kubernetes.client.CoreV1Api(api_client), kubernetes.client.CustomObjectsApi(api_client)
    scheduling = kubernetes.client.SchedulingV1Api(api_client)
    suffix = uuid.uuid4().hex[:6]
    batch, serving = f"batch-{suffix}", f"serving-{suffix}"
    gpu_node = node(gpus=1).node
    scheduling.create_priority_class({"metadata": {"name": batch}, "value": 1000, "preemptionPolicy": "Never"})
    try:
        core.create_namespaced_pod(ns, {"metadata": {"name": "training"}, "spec": {
            "priorityClassName": batch,
            "containers": [{"name": "train", "image": "busybox:1.36",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
        wait_for(lambda: core.read_namespaced_pod("training", ns).spec.node_name == gpu_node, 30,
                 what="the batch pod on the GPU node")

        start_operator()
        body = sample(ns)
        body["spec"]["runtime"].update({"gpus": 1, "priorityClassName": serving})
        body["spec"]["scaling"].update({"minReplicas": 1, "maxReplicas": 1})
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        name = body["metadata"]["name"]

        # No such PriorityClass yet: Priority admission refuses the ReplicaSet's pods, and Ready says so.
        ready = wait_for(lambda: (c := condition(custom, ns, name, "Ready")) and c["reason"] == "PodsNotCreated"
                         and c, 30, what="Ready=False PodsNotCreated")
        assert ready["status"] == "False" and serving in ready["message"], ready

        scheduling.create_priority_class({"metadata": {"name": serving}, "value": 100000})

        def served() -> bool:
            pods = core.list_namespaced_pod(ns, label_selector=f"{LABEL}={name}").items
            return any(p.spec.node_name == gpu_node and not p.metadata.deletion_timestamp
                       and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                       for p in pods)

        wait_for(served, 90, what="the fleet's pod Ready on the GPU node")
        pod = core.list_namespaced_pod(ns, label_selector=f"{LABEL}={name}").items[0]
        assert (pod.spec.priority_class_name, pod.spec.priority) == (serving, 100000)
        try:
            victim = core.read_namespaced_pod("training", ns)
            assert victim.metadata.deletion_timestamp, "the batch pod was not preempted"
        except ApiException as exc:
            assert exc.status == 404  # preempted and gone
        wait_for(lambda: condition(custom, ns, name, "Ready").get("status") == "True", 30, what="Ready=True")
    finally:
        for pc in (batch, serving):
            try:
                scheduling.delete_priority_class(pc)
            except ApiException as exc:
                if exc.status != 404:
                    raise
