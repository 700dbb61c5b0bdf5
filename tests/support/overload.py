"""A service driven past what its replicas serve, for tests of what stops a scale-up (a Node out of GPUs,
a namespace's GPU quota): the exporter's load, Debian's Prometheus scraping it, the operator reading
that Prometheus, and the fast-scaling sample."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes

from support.cluster import condition, fast_scaling_sample, wait_for
from support.triton_exporter import TritonExporter, ready_replicas, scraped_exporter
from tritonscale.api.spec import GROUP, PLURAL, VERSION


@contextmanager
def overloaded(workdir: Path, api_client: kubernetes.client.ApiClient, ns: str, name: str,
               start_operator: Callable[..., Any], beyond: str) -> Iterator[tuple[TritonExporter, Any, dict[str, Any]]]:
    """Far more load than two replicas serve (p95 3x the 100 ms target with a queue behind it), the operator
    started against it and the fast-scaling sample ``name`` created; yields (exporter, operator, the
    Schedulable condition) once the Deployment asks for more than two replicas (``beyond``: what two are,
    for the wait's message) and Schedulable is False. Stops Prometheus and the exporter after."""
    apps = kubernetes.client.AppsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    exporter, prom = scraped_exporter(workdir, ns, name, pods=ready_replicas(apps, ns, name))
    try:
        exporter.set(name, rps=200.0, p95_ms=300.0, queue_ms=200.0, pending=50.0, batch_size=8.0, batch_ms=40.0)
        op = start_operator("--prometheus-url", prom.url)
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, fast_scaling_sample(ns))
        wait_for(lambda: apps.read_namespaced_deployment(name, ns).spec.replicas > 2, 30,
                 what=f"a scale-up beyond {beyond}")
        cond = wait_for(lambda: (c := condition(custom, ns, name, "Schedulable")).get("status") == "False" and c, 20,
                        what="Schedulable=False in status")
        print(f"\nSchedulable condition: {cond}")
        yield exporter, op, cond
    finally:
        prom.stop()
        exporter.stop()


def replicas_asked_as_load_triples(exporter: TritonExporter, api_client: kubernetes.client.ApiClient, ns: str,
                                   name: str) -> list[int]:
    """Triple the load, and read the Deployment's replicas every 0.2 s for 16 s: 8 ticks of the sample's
    2 s, and its 10 s rate() window has caught up by then."""
    apps = kubernetes.client.AppsV1Api(api_client)
    exporter.set(name, rps=600.0, p95_ms=600.0, pending=150.0)
    seen = []
    deadline = time.monotonic() + 16
    while time.monotonic() < deadline:
        seen.append(apps.read_namespaced_deployment(name, ns).spec.replicas)
        time.sleep(0.2)
    return seen
