"""`tritonscale run --namespace A --namespace B` reconciles only those namespaces."""

from __future__ import annotations

import time

import kubernetes
import yaml
from conftest import SAMPLES, exists, wait_for

from tritonscale.api.spec import GROUP, PLURAL, VERSION


def test_repeated_namespace_flag_limits_the_operator(cluster, api_client, start_operator):
    cluster.api.extra_namespaces.update({"team-a", "team-b", "team-c"})
    op = start_operator("--namespace", "team-a", "--namespace", "team-b")
    custom = kubernetes.client.CustomObjectsApi(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    for ns in ("team-a", "team-b", "team-c"):
        body = yaml.safe_load((SAMPLES / "python-cpu.yaml").read_text())
        body["metadata"]["namespace"] = ns
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    deployed = apps.read_namespaced_deployment
    wait_for(lambda: exists(deployed, "linear", "team-a") and exists(deployed, "linear", "team-b"), 15,
             what="children in team-a and team-b")
    time.sleep(1.0)
    assert not exists(deployed, "linear", "team-c"), "team-c is not watched and must be left alone"
    assert op.alive() and "Traceback" not in op.output(), op.output()[-2000:]
