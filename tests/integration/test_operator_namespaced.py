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


def test_a_watched_namespace_it_may_not_read_stops_only_that_namespace(control_plane, api_client, start_operator,
                                                                       tmp_path):
    """A watched namespace with no Role for the operator (a tenant deleted and recreated it, and the chart's
    Role went with it; Helm does not put it back): Kopf gave up on its watch after its backoffs (54 s) and
    then failed as a whole -- every namespace unserved, and the process hung with its Lease renewed, or
    exited with 22 tracebacks (an exploratory review). Now that namespace's watch is retried without end
    (kopf_settings.NamespaceWatchRetries), and the other namespace is served past those 54 s."""
    team_a, team_x = (create_namespace(api_client, f"partial-{t}") for t in "ax")
    try:
        install = install_chart(control_plane.kubeconfig, tmp_path, "tritonscale-partial",
                                {"watchNamespaces": [team_a]})  # no Role in team-x
        op = start_operator("--namespace", team_a, "--namespace", team_x, install=install)
        started = time.monotonic()
        custom = kubernetes.client.CustomObjectsApi(api_client)
        apps = kubernetes.client.AppsV1Api(api_client)
        custom.create_namespaced_custom_object(GROUP, VERSION, team_a, PLURAL, sample(team_a))
        wait_for(lambda: exists(apps.read_namespaced_deployment, "linear", team_a), 15, what="children in team-a")
        time.sleep(max(0.0, 60.0 - (time.monotonic() - started)))  # past Kopf's default backoffs
        assert op.alive(), op.output()[-3000:]
        second = sample(team_a)
        second["metadata"]["name"] = "second"
        custom.create_namespaced_custom_object(GROUP, VERSION, team_a, PLURAL, second)
        wait_for(lambda: exists(apps.read_namespaced_deployment, "second", team_a), 15,
                 what="children of an InferenceService created after the backoffs ran out")
        out = op.output()
        assert "forbidden" in out and team_x in out, out[-3000:]  # the namespace it may not read is said
        assert "Traceback" not in out and "has failed" not in out, out[-3000:]
    finally:
        for ns in (team_a, team_x):
            delete_namespace(api_client, ns)


def test_deleting_a_watched_namespace_ends_its_services_autoscaler(control_plane, api_client, start_operator,
                                                                   tmp_path):
    """Deleting a namespace watched through a Role (watchNamespaces) takes the Role with it, so the operator's
    reads there are refused (403), not the 404 that ends an autoscaler loop: the loop of each service in it
    ran on, failing every tick, and exported the gone service's metrics until a restart (an exploratory
    audit). The watch's DELETED event ends it."""
    team = create_namespace(api_client, "gone")
    core = kubernetes.client.CoreV1Api(api_client)
    try:
        install = install_chart(control_plane.kubeconfig, tmp_path, "tritonscale-gone", {"watchNamespaces": [team]})
        op = start_operator("--namespace", team, "--verbose", install=install)  # a failing tick repeated is DEBUG
        custom = kubernetes.client.CustomObjectsApi(api_client)
        apps = kubernetes.client.AppsV1Api(api_client)
        custom.create_namespaced_custom_object(GROUP, VERSION, team, PLURAL, sample(team))  # ticks every 2 s
        wait_for(lambda: exists(apps.read_namespaced_deployment, "linear", team), 15, what="children")
        time.sleep(3.0)  # a tick or two
        core.delete_namespace(team)  # as a tenant would: the InferenceService and the Role go together
        wait_for(lambda: not exists(core.read_namespace, team), 60, what="the namespace to be gone")
        since = len(op.output())
        time.sleep(8.0)  # four ticks of 2 s
        after = op.output()[since:]
        assert "autoscaler tick failed" not in after and "resync failed" not in after, after[-3000:]
        assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]
    finally:
        if exists(core.read_namespace, team):
            delete_namespace(api_client, team)
