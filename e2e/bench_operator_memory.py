"""Benchmark: the operator's memory (RSS) with N InferenceServices (default 1,000) on
a real control plane.

    .venv/bin/python e2e/bench_operator_memory.py [--services 1000] [--settle 60]

It starts the control plane (tritonscale.cluster, binaries built once and cached),
installs the CRD, creates N InferenceServices (the python-cpu sample, default
autoscaler interval) over 10 namespaces, starts `tritonscale run` (no Prometheus:
each autoscaler tick holds and says so), waits until every object has its four
children and a status, lets it run for --settle seconds, and prints the operator's
RSS (VmRSS, and the peak VmHWM) from /proc. The Deployment controller makes a
ReplicaSet and a pod per object; there are no Nodes, so the pods stay Pending and
every tick's pod census reports them unschedulable.

A benchmark, not a test: it prints figures and asserts nothing about them.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import kubernetes
import yaml

from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.cluster import ControlPlane
from tritonscale.kube.client import client_for
from tritonscale.sandbox.cluster_setup import apply_crd
from tritonscale.sandbox.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[1]
NAMESPACES = 10


def _rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--settle", type=float, default=60.0, help="seconds to keep running once all are reconciled")
    args = ap.parse_args()
    n = args.services
    # SIGTERM (e.g. from `timeout`) skips atexit; make it a normal exit so `finally` stops everything.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    work = Path(tempfile.mkdtemp(prefix="tritonscale-memory-"))
    plane = ControlPlane(work / "control-plane", progress=lambda line: print(f"control plane: {line}", flush=True))
    operator = None
    try:
        # The CRD before the controllers start, so the garbage collector knows it at once.
        kubeconfig = plane.start(before_controllers=lambda path: apply_crd(client_for(path)))
        client = client_for(kubeconfig)
        core, custom = kubernetes.client.CoreV1Api(client), kubernetes.client.CustomObjectsApi(client)
        sample = yaml.safe_load((REPO / "manifests" / "samples" / "python-cpu.yaml").read_text())
        for key in ("intervalSeconds", "windowSeconds"):  # the CRD defaults: a tick every 15 s
            sample["spec"]["scaling"].pop(key, None)
        for i in range(NAMESPACES):
            core.create_namespace({"metadata": {"name": f"ns{i}"}})
        t0 = time.monotonic()
        for i in range(n):
            ns, name = f"ns{i % NAMESPACES}", f"svc-{i}"
            body = {**sample, "metadata": {"name": name, "namespace": ns}}
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        print(f"created {n} InferenceServices in {time.monotonic() - t0:.1f} s", flush=True)

        t0 = time.monotonic()
        operator = OperatorProcess(kubeconfig, work / "operator.log").start()
        assert operator.proc is not None and operator.pid is not None
        apps = kubernetes.client.AppsV1Api(client)
        while True:
            items = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
            with_status = sum(1 for o in items if (o.get("status") or {}).get("conditions"))
            deployments = len(apps.list_deployment_for_all_namespaces().items)
            if with_status == n and deployments == n:
                break
            if not operator.alive():
                print(f"the operator exited ({operator.proc.returncode}); see {work / 'operator.log'}")
                return 1
            time.sleep(2)
        reconciled_s = time.monotonic() - t0
        rss_at_reconciled, _ = _rss_kib(operator.pid)
        print(f"operator reconciled all {n} ({n} Deployments, every status written) in {reconciled_s:.0f} s; "
              f"RSS then {rss_at_reconciled / 1024:.0f} MiB", flush=True)
        samples = []
        deadline = time.monotonic() + args.settle
        while time.monotonic() < deadline:
            samples.append(_rss_kib(operator.pid)[0])
            time.sleep(1)
        rss, hwm = _rss_kib(operator.pid)
        pods = len(core.list_pod_for_all_namespaces(label_selector=LABEL).items)
        print(f"InferenceServices:                 {n}")
        print(f"children (ConfigMap, Deployment, Service, PDB): {4 * n}; pods (Pending, no Nodes): {pods}")
        print(f"operator RSS after {args.settle:.0f} s more: {rss / 1024:.0f} MiB "
              f"(min {min(samples) / 1024:.0f}, max {max(samples) / 1024:.0f} over that time; "
              f"peak VmHWM {hwm / 1024:.0f} MiB)")
        errors = sum(1 for line in (work / "operator.log").read_text().splitlines() if " ERROR " in line)
        print(f"operator log: {errors} ERROR lines ({work / 'operator.log'})")
        return 0
    finally:
        if operator is not None:
            operator.stop(timeout=15)
        plane.stop()


if __name__ == "__main__":
    sys.exit(main())
