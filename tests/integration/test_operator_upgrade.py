"""An operator upgrade that renders another pod template for unchanged specs rolls the fleets one at a time
(``--max-upgrade-rollouts``, default 1; reconcile/upgrade_rollouts.py), against the real control plane and
the real operator process: the Deployment controller rolls the pods, a stand-in kubelet marks them Ready.

The older operator is played by the test: with the operator stopped, each Deployment is given an older
version's record and a pod template without one flag, under the operator's own field manager (as the
older operator would have written it), and rolls to it. The operator then starts, finds every fleet's
template out of date for specs nobody changed, and rolls them back in one at a time."""

from __future__ import annotations

import shlex
import threading
import time
from pathlib import Path

import kubernetes

from support.cluster import run_tool, sample, wait_for
from tritonscale import __version__
from tritonscale.api import status as st
from tritonscale.api.spec import GROUP, PLURAL, RENDERED_BY_ANNOTATION, VERSION
from tritonscale.kube.client import FIELD_MANAGER

CHART = Path(__file__).resolve().parents[2] / "charts" / "tritonscale"
NAMES = ("alpha", "beta", "gamma")
FLAG = "--grpc-max-connection-age="


def _done(d: dict) -> bool:
    """The rollout is over: the controller has seen the latest write and every pod is of it, and ready."""
    s = d.get("status") or {}
    return (s.get("observedGeneration") == d["metadata"]["generation"] and not st.deployment_rollout(d).updating
            and s.get("readyReplicas") == d["spec"]["replicas"])


class RolloutSampler(threading.Thread):
    """Every 50 ms: the Deployments rolling out (``deployment_rollout().updating``)."""

    def __init__(self, apps: kubernetes.client.AppsV1Api, client: kubernetes.client.ApiClient, ns: str):
        super().__init__(daemon=True)
        self.apps, self.client, self.ns = apps, client, ns
        self.stop_flag, self.samples = threading.Event(), []

    def run(self) -> None:
        while not self.stop_flag.is_set():
            items = self.apps.list_namespaced_deployment(self.ns).items
            deps = [self.client.sanitize_for_serialization(d) for d in items]
            self.samples.append(sorted(d["metadata"]["name"] for d in deps if st.deployment_rollout(d).updating))
            self.stop_flag.wait(0.05)


def _notes_command() -> list[str]:
    """The chart's NOTES command that lists the fleets an upgrade still makes wait."""
    notes = run_tool("helm", "install", "t", str(CHART), "--dry-run=client").stdout
    line = next(x.strip() for x in notes.splitlines() if "UpgradePending" in x and x.strip().startswith("kubectl"))
    return shlex.split(line)


def test_an_upgrade_rolls_the_fleets_one_at_a_time(api_client, control_plane, audit_log, operator_install, namespace,
                                                   models_claim, node, start_operator):
    ns = namespace
    apps, custom = kubernetes.client.AppsV1Api(api_client), kubernetes.client.CustomObjectsApi(api_client)
    core = kubernetes.client.CoreV1Api(api_client)
    s = api_client.sanitize_for_serialization
    node(ready_after_s=1.0)  # each new pod warms up for 1 s: a rollout takes a few seconds

    def deployment(name: str) -> dict:
        return s(apps.read_namespaced_deployment(name, ns))

    def args(name: str) -> list[str]:
        return deployment(name)["spec"]["template"]["spec"]["containers"][0]["args"]

    op = start_operator()
    for name in NAMES:
        body = sample(ns)
        body["metadata"]["name"] = name
        body["spec"]["model"]["name"] = "linear"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    for name in NAMES:
        wait_for(lambda n=name: _done(deployment(n)), 60, interval=0.2, what=f"{name}'s first pods ready")
        assert deployment(name)["metadata"]["annotations"][RENDERED_BY_ANNOTATION] == __version__
    op.stop()

    # The older operator's rendering: another version, and a template without the connection-age flag.
    for name in NAMES:
        older = [a for a in args(name) if not a.startswith(FLAG)]
        assert len(older) == len(args(name)) - 1
        apps.patch_namespaced_deployment(name, ns, {
            "metadata": {"annotations": {RENDERED_BY_ANNOTATION: "0.0.1"}},
            "spec": {"template": {"spec": {"containers": [{"name": "triton", "args": older}]}}},
        }, field_manager=FIELD_MANAGER)
    for name in NAMES:
        wait_for(lambda n=name: _done(deployment(n)), 60, interval=0.2, what=f"{name} rolled to the older template")

    sampler = RolloutSampler(apps, api_client, ns)
    sampler.start()
    try:
        op = start_operator()

        def upgraded() -> bool:
            return all(any(a.startswith(FLAG) for a in args(n)) and _done(deployment(n))
                       and deployment(n)["metadata"]["annotations"][RENDERED_BY_ANNOTATION] == __version__
                       for n in NAMES)

        wait_for(upgraded, 120, interval=0.5, what="every fleet on the new template",
                 detail=lambda: op.output()[-3000:])
        time.sleep(0.3)
    finally:
        sampler.stop_flag.set()
        sampler.join(5)

    # The gate counts from the watch: Kopf's own list for its watch, and the gate's one list at its first
    # question -- not a list per waiting fleet and per wake-up.
    lists = [r.uri for r in audit_log.requests(op.audit_mark, user=operator_install.user)
             if r.verb == "list" and r.resource == "deployments"]
    print(f"the operator's lists of Deployments during the upgrade: {len(lists)}: {lists}")
    assert len(lists) <= 2, lists
    at_once = max(len(x) for x in sampler.samples)
    seen = {n for x in sampler.samples for n in x}
    print(f"\n{len(sampler.samples)} samples; fleets rolling at once: at most {at_once}; rolled: {sorted(seen)}")
    assert seen == set(NAMES), "the sampler saw each fleet roll"
    assert at_once == 1, "one fleet at a time (--max-upgrade-rollouts 1)"
    # Two of the three waited, said so, and say now that their template is written.
    waited = {e.involved_object.name for e in core.list_namespaced_event(ns).items if e.reason == "UpgradeWaiting"}
    assert len(waited) == 2, waited
    for name in waited:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        cond = next(c for c in obj["status"]["conditions"] if c["type"] == st.UPGRADE_PENDING)
        assert (cond["status"], cond["reason"]) == ("False", "RollingOut"), cond
    # The chart's NOTES command shows it: False for the two that waited, nothing for the first.
    cmd = _notes_command()
    table = run_tool(cmd[0], "--kubeconfig", str(control_plane.kubeconfig), *cmd[1:]).stdout
    rows = {r.split()[1]: r.split()[2] for r in table.splitlines()[1:] if r.split()[0] == ns}
    assert rows == {n: "False" if n in waited else "<none>" for n in NAMES}, table
    assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]
