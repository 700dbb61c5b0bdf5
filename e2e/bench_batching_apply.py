#!/usr/bin/env python
"""p95 while a batcher change reaches live tritonservers, two ways, under a steady load.

The sandbox's parts without the operator: a real control plane (its Deployment and
EndpointSlice controllers), the sandbox kubelet whose pods are real tritonservers, and the
operator's own children (``build_children`` of the sandbox's sized sample). An open-loop Poisson
load goes through the Service's ready endpoints, as kube-proxy would send it. At ``--change-at``
the batcher settings change (queue delay and preferred sizes, ``--to-delay-us``,
``--to-preferred``), applied the way the operator would:

* ``model-control``: the pods run ``--model-control-mode=explicit --load-model=<m>``; the
  ConfigMap gets the new config.pbtxt (for pods started later) without touching the pod
  template, and every ready pod's tritonserver reloads the model with the new settings
  (``sandbox.model_control.apply_settings``: ``POST v2/repository/models/<m>/load`` with
  the config override);
* ``rollout``: the ConfigMap gets the new config.pbtxt and the pod template its hash
  (``tritonscale.io/config-hash``), and the Deployment controller rolls the pods
  (maxSurge 25% -- one pod at 2 replicas -- and maxUnavailable 0).

Printed per way: p50/p95/p99 and errors before the change, during it (from the change until
every pod serves the new settings) and after it, and how long it took.

    .venv/bin/python e2e/bench_batching_apply.py [--ways model-control,rollout] [--rps 30]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "operator"))  # run from a checkout

from tritonscale.api.spec import HASH_ANNOTATION, LABEL  # noqa: E402
from tritonscale.api.validation import validate_body  # noqa: E402
from tritonscale.kube.client import client_for  # noqa: E402
from tritonscale.render.kubernetes_objects import build_children, config_hash  # noqa: E402
from tritonscale.render.triton_config import render_config_pbtxt  # noqa: E402
from tritonscale.sandbox import loadgen, model_control  # noqa: E402
from tritonscale.sandbox.cluster_setup import provision_model_store  # noqa: E402
from tritonscale.sandbox.kubelet import Kubelet  # noqa: E402
from tritonscale.sandbox.node_registration import machine_resources  # noqa: E402
from tritonscale.sandbox.pod_network import PodNetwork  # noqa: E402
from tritonscale.sandbox.scenario import Scenario, load_service  # noqa: E402
from tritonscale.sandbox.service_routing import ServiceRouter  # noqa: E402

NS, NAME, NODE = "default", "linear", "sandbox-node-0"


def _ready(pod: dict[str, Any]) -> bool:
    return {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}.get("Ready") == "True"


def service_body(way: str) -> dict[str, Any]:
    body = load_service(Scenario())
    if way == "model-control":
        body["spec"]["runtime"]["extraArgs"] = model_control.explicit_args(NAME)
    return body


def children(body: dict[str, Any]) -> list[dict[str, Any]]:
    owner = copy.deepcopy(body)
    owner["metadata"]["uid"] = "not-a-real-owner"
    spec, problems = validate_body(body)
    assert spec is not None, problems
    out = build_children(spec, owner)
    for child in out:
        child["metadata"].pop("ownerReferences")  # no InferenceService: the GC would collect them
    return out


def changed_config(body: dict[str, Any], settings: model_control.BatcherSettings) -> str:
    new = copy.deepcopy(body)
    new["spec"]["batching"]["maxQueueDelayMicroseconds"] = settings.max_queue_delay_microseconds
    new["spec"]["batching"]["preferredBatchSizes"] = list(settings.preferred_batch_sizes)
    spec, problems = validate_body(new)
    assert spec is not None, problems
    return render_config_pbtxt(spec, NAME)


def window(result: loadgen.LoadResult, t0: float, t1: float) -> str:
    w = result.window(t0, t1)
    errors = ", ".join(f"{k} {v}" for k, v in sorted(w.error_counts().items())) or "none"
    return (f"{t1 - t0:5.1f} s {w.requests:5d} req  p50 {w.p50_ms:6.1f}  p95 {w.p95_ms:6.1f}  "
            f"p99 {w.p99_ms:6.1f} ms  errors {w.errors} ({errors})")


async def run_way(way: str, args: argparse.Namespace, plane: Any, workdir: Path) -> dict[str, Any]:
    import kubernetes

    admin = client_for(plane.kubeconfig)
    core, apps = kubernetes.client.CoreV1Api(admin), kubernetes.client.AppsV1Api(admin)
    body = service_body(way)
    configmap, deployment, service, _ = children(body)
    provision_model_store(admin, workdir / "store", NS, "models", "linear")
    # The operator's ConfigMaps are immutable, one per config; here the one ConfigMap is patched in place
    # (the model-control way keeps it in step for pods started later, without a new template).
    configmap.pop("immutable", None)
    config_name = configmap["metadata"]["name"]
    core.create_namespaced_config_map(NS, configmap)
    core.create_namespaced_service(NS, service)
    deployment["spec"]["replicas"] = args.replicas
    apps.create_namespaced_deployment(NS, deployment)
    network = PodNetwork()
    node = client_for(plane.kubeconfig_for(f"system:node:{NODE}", ["system:nodes"]))
    kubelet = Kubelet(node, workdir / "kubelet", node_name=NODE, resources=machine_resources(gpus=args.replicas + 1),
                      network=network)
    await kubelet.start()
    router = ServiceRouter(admin, NS, NAME, network).start()
    target = model_control.BatcherSettings(args.to_delay_us, tuple(args.to_preferred))
    new_config = changed_config(body, target)

    def pods() -> list[dict[str, Any]]:
        return json.loads(core.list_namespaced_pod(NS, label_selector=f"{LABEL}={NAME}",
                                                   _preload_content=False).data)["items"]

    def serving_new() -> bool:
        """Every pod in the endpoints serves the new settings (read back from Triton)."""
        backends = router.backends()
        if len(backends) < args.replicas:
            return False
        for b in backends:
            try:
                if model_control.settings_of(model_control.read_config(f"http://{b}", NAME)) != target:
                    return False
            except model_control.ModelControlError:
                return False
        return True

    try:
        deadline = time.monotonic() + 120
        while len(router.backends()) < args.replicas or len([p for p in pods() if _ready(p)]) < args.replicas:
            if time.monotonic() > deadline:
                raise SystemExit(f"{way}: {args.replicas} ready pods did not appear")
            await asyncio.sleep(0.5)
        arrivals = loadgen.step_schedule([(args.duration, args.rps)], seed=args.seed)
        load = asyncio.create_task(loadgen.run_load(router.backends, NAME, arrivals, timeout_s=30.0))
        started = time.time()
        await asyncio.sleep(args.change_at)
        t_change = time.time() - started
        # Both ways keep the ConfigMap in step, so pods started later load the new settings.
        core.patch_namespaced_config_map(config_name, NS, {"data": {"config.pbtxt": new_config}})
        if way == "model-control":
            for b in router.backends():
                await asyncio.to_thread(model_control.apply_settings, f"http://{b}", NAME, target)
        else:
            apps.patch_namespaced_deployment(NAME, NS, {"spec": {"template": {"metadata": {"annotations": {
                HASH_ANNOTATION: config_hash(new_config)}}}}})
        while not await asyncio.to_thread(serving_new):
            if time.time() - started > args.duration - 5:
                raise SystemExit(f"{way}: the change did not reach every pod within the run")
            await asyncio.sleep(0.2)
        if way == "rollout":  # done once the old pods have left the endpoints too
            while len([p for p in pods() if not p["metadata"].get("deletionTimestamp")]) > args.replicas:
                await asyncio.sleep(0.2)
        t_done = time.time() - started
        result = await load
    finally:
        router.stop()
        await kubelet.stop()
        for kind, delete in (("Deployment", apps.delete_namespaced_deployment),
                             ("Service", core.delete_namespaced_service),
                             ("ConfigMap", core.delete_namespaced_config_map)):
            try:
                delete(config_name if kind == "ConfigMap" else NAME, NS)
            except kubernetes.client.ApiException:
                pass
    return {"way": way, "result": result, "t_change": t_change, "t_done": t_done, "restarts": kubelet.restarts,
            "pods_started": len(kubelet.started_pids)}


def report(r: dict[str, Any], duration: float) -> None:
    res = r["result"]
    print(f"{r['way']}: change took {r['t_done'] - r['t_change']:.1f} s; tritonservers started "
          f"{r['pods_started']} (restarts {r['restarts']})")
    print(f"  before  {window(res, 0.0, r['t_change'])}")
    print(f"  during  {window(res, r['t_change'], r['t_done'])}")
    print(f"  after   {window(res, r['t_done'], duration)}", flush=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ways", default="model-control,rollout")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--rps", type=float, default=30.0, help="steady Poisson rate (default 30: 2 replicas at 30%%)")
    ap.add_argument("--duration", type=float, default=90.0)
    ap.add_argument("--change-at", type=float, default=30.0)
    ap.add_argument("--to-delay-us", type=int, default=0)
    ap.add_argument("--to-preferred", type=lambda s: [int(x) for x in s.split(",") if x], default=[])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from tritonscale.cluster import ControlPlane

    body = load_service(Scenario())
    b, m = body["spec"]["batching"], body["spec"]["model"]
    print(f"sandbox sample: batch cost {m['parameters']['cost_base_ms']} + {m['parameters']['cost_per_item_ms']}"
          f"·n ms, max batch {m['maxBatchSize']}; {args.replicas} replicas; Poisson {args.rps:g} rps for "
          f"{args.duration:g} s (seed {args.seed}); change at {args.change_at:g} s: delay "
          f"{b['maxQueueDelayMicroseconds']} -> {args.to_delay_us} us, preferred {b['preferredBatchSizes']} -> "
          f"{args.to_preferred}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-batching-apply-") as tmp:
        for way in args.ways.split(","):
            plane = ControlPlane(Path(tmp) / way / "control-plane")
            plane.start()
            try:
                r = await run_way(way, args, plane, Path(tmp) / way)
            finally:
                plane.stop()
            report(r, args.duration)


if __name__ == "__main__":
    asyncio.run(main())
