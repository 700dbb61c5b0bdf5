"""An operator restart loses no autoscaler state and never dips below what was running."""

from __future__ import annotations

import threading
import time

import kubernetes

from support.cluster import sample, wait_for
from tritonscale.api.spec import GROUP, PLURAL, VERSION

NAME = "linear"


def test_restart_keeps_replicas_and_decider_memory(api_client, namespace, start_operator):
    NS = namespace
    custom = kubernetes.client.CustomObjectsApi(api_client)
    apps = kubernetes.client.AppsV1Api(api_client)
    body = sample(NS)
    # Prometheus is unreachable (port 9 is discard): after 2 failed ticks the fallback applies.
    body["spec"]["scaling"].update({"minReplicas": 1, "maxReplicas": 4, "intervalSeconds": 1,
                                    "fallbackReplicas": 3, "failureThreshold": 2})
    op = start_operator("--prometheus-url", "http://127.0.0.1:9")
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    wait_for(lambda: apps.read_namespaced_deployment(NAME, NS).spec.replicas == 3, 15, what="fallbackReplicas")

    seen: list[int] = []
    reasons: list[str] = []  # the Scaling condition's reason, as status had it, after the restart
    stop = threading.Event()
    restarted = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                seen.append(apps.read_namespaced_deployment(NAME, NS).spec.replicas)
                if restarted.is_set():
                    obj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)
                    reasons.append(next(c["reason"] for c in obj["status"]["conditions"] if c["type"] == "Scaling"))
            except (kubernetes.client.ApiException, KeyError, StopIteration):
                pass
            stop.wait(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    before = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)["status"]["scalingState"]
    assert before["failures"] == 2  # counted up to failureThreshold, no further
    op.proc.kill()  # no graceful shutdown: the memory must already be in status
    op.proc.wait(10)
    time.sleep(1.0)
    restarted.set()
    op2 = start_operator("--prometheus-url", "http://127.0.0.1:9")
    # The fallback goes through the scale-down window, so each tick writes its memory: wait for one, then
    # three seconds of them
    wait_for(lambda: custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)["status"][
        "scalingState"] != before, 15, what="a tick after the restart")
    time.sleep(3.0)
    stop.set()
    t.join(5)

    status = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, NAME)["status"]
    # The failure count went on from where it was (not from 0): the first tick after the restart was
    # the fallback's already -- with the memory lost it would have held (MetricsUnavailable) first.
    assert status["scalingState"]["failures"] == 2
    assert reasons and set(reasons) == {"FallbackAfterFailures"}, sorted(set(reasons))
    assert set(seen) == {3}, f"replicas changed across the restart: {sorted(set(seen))}"
    assert op2.alive() and "Traceback" not in op2.output()
