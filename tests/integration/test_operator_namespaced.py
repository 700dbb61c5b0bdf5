"""`tritonscale run --namespace A --namespace B` reconciles only those namespaces, running
as the ServiceAccount of a chart release installed for exactly those namespaces
(`watchNamespaces: [A, B]`: a Role in each plus read-only cluster lookups), so the
real authorizer enforces the namespaced RBAC."""

from __future__ import annotations

import time

import kubernetes

from support.cluster import create_namespace, delete_namespace, exists, install_chart, sample, wait_for
from tritonscale.api.spec import GROUP, PLURAL, VERSION


def test_repeated_namespace_flag_limits_the_operator(control_plane, api_client, audit_log, start_operator,
                                                     tmp_path):
    team_a, team_b, team_c = (create_namespace(api_client, f"team-{t}") for t in "abc")
    try:
        install = install_chart(control_plane.kubeconfig, tmp_path, "tritonscale-ns",
                                {"watchNamespaces": [team_a, team_b]})
        op = start_operator("--namespace", team_a, "--namespace", team_b, install=install)
        custom = kubernetes.client.CustomObjectsApi(api_client)
        apps = kubernetes.client.AppsV1Api(api_client)
        for ns in (team_a, team_b, team_c):
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, sample(ns))
        deployed = apps.read_namespaced_deployment
        wait_for(lambda: exists(deployed, "linear", team_a) and exists(deployed, "linear", team_b), 15,
                 what="children in team-a and team-b")
        time.sleep(1.0)
        assert not exists(deployed, "linear", team_c), "team-c is not watched and must be left alone"
        assert op.alive() and "Traceback" not in op.output(), op.output()[-2000:]
        refused = [r for r in audit_log.requests(op.audit_mark, user=install.user) if r.code == 403]
        assert not refused, f"the namespaced RBAC refused: {[(r.verb, r.resource, r.namespace) for r in refused]}"
    finally:
        for ns in (team_a, team_b, team_c):
            delete_namespace(api_client, ns)
