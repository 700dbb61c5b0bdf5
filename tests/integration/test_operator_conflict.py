"""Two operators acting on one InferenceService, on the real control plane: each posts a Warning
event OperatorConflict naming the other.

An exploration (session 55) passed the chart's install-time overlap check (a release scaled to 0
is passed over) and ran two operators whose namespaces overlapped: both reconciled and ticked the
same object, with no Event, condition or log line. Here one operator runs with the chart's leader
Lease and one without election (another identity, as a second install's would be), both as the
chart's ServiceAccount, on one sample InferenceService that ticks every 2 s.
"""

from __future__ import annotations

import socket

import kubernetes

from support.cluster import OPERATOR_NAMESPACE, RELEASE, sample, wait_for
from tritonscale.api.spec import GROUP, PLURAL, VERSION


def test_two_operators_on_one_inference_service_each_name_the_other(start_operator, api_client, namespace,
                                                                     lease):
    elected = f"lease {OPERATOR_NAMESPACE}/{RELEASE}"
    plain = f"host {socket.gethostname()}"
    first = start_operator("--leader-elect", f"--leader-elect-resource-name={RELEASE}",
                           f"--leader-elect-resource-namespace={OPERATOR_NAMESPACE}")
    body = sample(namespace)
    kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                                   PLURAL, body)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    name = body["metadata"]["name"]

    def stamped_by() -> str | None:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return (obj.get("status") or {}).get("operator")

    wait_for(lambda: stamped_by() == elected, 60, interval=0.5, what="the elected operator's first tick")
    core = kubernetes.client.CoreV1Api(api_client)

    def conflicts() -> list[str]:
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        return [e.message for e in events if e.reason == "OperatorConflict"]

    assert conflicts() == []  # one operator alone: no conflict
    second = start_operator()  # no election: cluster-wide, as another install
    said = wait_for(lambda: (c := conflicts()) and len(c) >= 2 and c, 90, interval=1.0,
                    what="both operators to post OperatorConflict")
    assert any(m.startswith(f"another operator ({plain}) also acts on this InferenceService: it wrote the "
                            f"autoscaler's status after this one ({elected}) did") for m in said), said
    assert any(m.startswith(f"another operator ({elected}) also acts on this InferenceService: it wrote the "
                            f"autoscaler's status after this one ({plain}) did") for m in said), said
    for op, other in ((first, plain), (second, elected)):  # and each says it in its log
        assert f"another operator ({other}) also acts on this InferenceService" in op.output(), op.output()[-2000:]
