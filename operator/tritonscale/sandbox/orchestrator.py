"""The sandbox's run: bring everything up, replay the load, tear everything down.

In this order, stopped in reverse on exit, error, Ctrl-C or SIGTERM:

1. a real control plane (:class:`tritonscale.cluster.ControlPlane`: etcd,
   kube-apiserver, kube-controller-manager, kube-scheduler), or the cluster of
   ``--kubeconfig``; its kubeconfig is printed first, for ``kubectl``;
2. the InferenceService CRD and the model store (:mod:`cluster_setup`);
3. a real Prometheus (Debian's package) whose file_sd the kubelets fill;
4. the kubelet(s) (:mod:`kubelet`), each a Node whose pods run as tritonservers,
   each as ``system:node:<name>`` when the sandbox started the control plane;
5. the operator, ``tritonscale run``, as a subprocess;
6. the InferenceService; once its warm floor is Ready, in the EndpointSlices and
   scraped, the load generator sends to the Service's ready endpoints
   (:mod:`service_routing`), with one live line per second.

``run_sandbox`` returns what was recorded (:class:`SandboxResult`); the summary and
plot are written by the CLI (:mod:`command`).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonscale.api.spec import GROUP, LABEL, PLURAL, VERSION
from tritonscale.kube.client import client_for
from tritonscale.sandbox import loadgen
from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox.cluster_setup import (
    apply_crd,
    check_free,
    model_store_volume,
    provision_model_store,
    remove_sandbox_objects,
    remove_service,
)
from tritonscale.sandbox.kubelet import Kubelet, KubeletEvent, ScrapeTargets
from tritonscale.sandbox.live_view import LiveView, Recorder, Sample, ScaleEvent
from tritonscale.sandbox.node_registration import machine_resources
from tritonscale.sandbox.operator_process import OperatorProcess
from tritonscale.sandbox.pod_network import PodNetwork
from tritonscale.sandbox.scenario import (
    LoadShape,
    SandboxError,
    Scenario,
    build_load,
    describe_config,
    load_service,
    model_store,
    scrape_interval_s,
)
from tritonscale.sandbox.service_routing import ServiceRouter
from tritonscale.sandbox.summary import build_summary

# Startup budgets. With the operator's probes (startup and readiness every 5 s) the first
# replica is Ready 5-10 s after the Deployment appears; Prometheus sees a new file_sd
# target ~5 s after it is written. A fresh machine builds the control plane first:
# that has no budget here (the build prints its own progress).
DEPLOYMENT_TIMEOUT_S = 60.0
FIRST_READY_TIMEOUT_S = 120.0
TARGET_UP_TIMEOUT_S = 30.0
TEARDOWN_STEP_S = 30.0


def unscheduled(core: Any, namespace: str, name: str) -> str | None:
    """Why the service's pods are not scheduled, as the scheduler says it (PodScheduled=False), or None:
    a sandbox that never saw a ready pod named nothing when the cause was a Pending one. ``core``: a
    CoreV1Api."""
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL}={name}")
    except Exception:  # noqa: BLE001 -- a best-effort hint in an error message
        return None
    for pod in pods.items:
        for cond in (pod.status.conditions or []) if pod.status else []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return f"pod {pod.metadata.name} is not scheduled: {cond.reason}: {cond.message}"
    return None


class Stopped(Exception):
    """``stop`` was set (Ctrl-C, SIGTERM) while waiting."""


@dataclass
class SandboxResult:
    summary: dict[str, Any]
    recorder: Recorder
    shape: LoadShape
    config: dict[str, Any]
    interrupted: bool
    workdir: Path
    kubeconfig: Path | None = None
    pids: list[int] = field(default_factory=list)  # every process (group) started
    leftover_pids: list[int] = field(default_factory=list)  # groups still alive after teardown

    @property
    def samples(self) -> list[Sample]:
        return self.recorder.samples

    @property
    def scale_events(self) -> list[ScaleEvent]:
        return self.recorder.scale_events


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def until(stop: asyncio.Event, awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` unless ``stop`` is set first (then raise Stopped)."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise Stopped()
    return task.result()


async def poll(stop: asyncio.Event, predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await until(stop, asyncio.sleep(interval))
    return None


class ClusterReader:
    """The once-a-second reads of the live view: the Deployment, the InferenceService, Events."""

    def __init__(self, client: Any, namespace: str, name: str) -> None:
        import kubernetes

        self.apps = kubernetes.client.AppsV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.core = kubernetes.client.CoreV1Api(client)
        self.namespace, self.name = namespace, name

    def deployment(self) -> dict[str, Any] | None:
        import kubernetes

        try:
            return json.loads(self.apps.read_namespaced_deployment(self.name, self.namespace,
                                                                  _preload_content=False).data)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def restart_counts(self) -> dict[str, int]:
        """``containerStatuses[].restartCount`` of the InferenceService's pods, as the API has them."""
        pods = json.loads(self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL}={self.name}",
                                                        _preload_content=False).data)["items"]
        return {p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in
                                           (p.get("status") or {}).get("containerStatuses") or [])
                for p in pods}

    def read(self) -> tuple[int | None, int, float | None, list[tuple[str, str, str]]]:
        """(spec.replicas, status.readyReplicas, the operator's p95, the Scaled and BatchingTuned Events
        as (uid, reason, message))."""
        dep = self.deployment() or {}
        desired = (dep.get("spec") or {}).get("replicas")
        ready = int((dep.get("status") or {}).get("readyReplicas") or 0)
        obj = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)
        p95 = (obj.get("status") or {}).get("p95Milliseconds")
        items = json.loads(self.core.list_namespaced_event(self.namespace, _preload_content=False).data)["items"]
        scaled = [(e["metadata"]["uid"], e["reason"], e.get("message") or "") for e in items
                  if e.get("reason") in ("Scaled", "BatchingTuned")
                  and (e.get("involvedObject") or {}).get("name") == self.name]
        return desired, ready, p95, scaled


async def run_sandbox(scenario: Scenario, *, stop: asyncio.Event | None = None,
                      view: LiveView | None = None) -> SandboxResult:
    """Bring everything up, replay the load, tear everything down; return what was recorded.

    Setting ``stop`` ends the run early (what Ctrl-C does); the result then has
    ``interrupted`` True and covers what ran. Raises :class:`SandboxError` if a part
    fails to start (after tearing down what did start).
    """
    stop = stop or asyncio.Event()
    wall0 = time.monotonic()
    body = load_service(scenario)
    config = describe_config(body)
    shape = build_load(scenario)
    ns, name, model = config["namespace"], config["inferenceservice"], config["model"]
    view = view or LiveView(config["target_p95_ms"])
    recorder = Recorder(shape.arrivals, config["target_p95_ms"])

    temp_workdir = scenario.workdir is None
    if scenario.workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="tritonscale-sandbox-"))
    else:
        workdir = Path(scenario.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    view.say(f"sandbox: {shape.description} for {scenario.duration_s:g} s against {name} "
             f"(a {config['cost_base_ms']:g} ms + b {config['cost_per_item_ms']:g} ms x n, batch <= "
             f"{config['max_batch_size']}, ~{config['replica_capacity_rps']:g} rps per replica; "
             f"target p95 {config['target_p95_ms']:g} ms, replicas {config['min_replicas']}..{config['max_replicas']})")
    view.say(f"sandbox: logs in {workdir}" + (" (removed after a clean run; keep them with --workdir)"
                                             if temp_workdir else ""))

    pids: list[int] = []
    teardown: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    made_service = False  # the InferenceService is the sandbox's (created by it): its pods may be removed
    operator_exited_at: float | None = None  # load time at which the operator was first seen gone
    kubelets: list[Kubelet] = []
    interrupted = failed = False
    kubeconfig: Path | None = None
    t0: float | None = None  # perf_counter at the start of the load

    def load_t() -> float:
        return time.perf_counter() - t0 if t0 is not None else 0.0

    def on_kubelet_event(ev: KubeletEvent) -> None:
        if ev.service != name:
            return
        text = ev.message.split(" (")[0] if ev.kind in ("started", "restarted", "stopping") else ev.message
        if t0 is None:
            view.say(f"sandbox: {text}")
            return
        if ev.kind in ("crashed", "restarted", "ready", "backoff", "unhealthy", "stopping"):
            recorder.add_mark(load_t(), ev.kind, ev.message)
        view.note(text)

    try:
        # 1. The control plane.
        if scenario.kubeconfig is not None:
            kubeconfig, plane = Path(scenario.kubeconfig), None
            view.say(f"sandbox: using the cluster of {kubeconfig}")
        else:
            from tritonscale.cluster import ClusterError, ControlPlane

            plane = ControlPlane(workdir / "control-plane", progress=lambda line: view.say(f"sandbox: {line}"))
            # The CRD goes in before kube-controller-manager starts, so its garbage collector
            # knows InferenceServices from its first discovery (it rediscovers every 30 s).
            starting = asyncio.ensure_future(asyncio.to_thread(
                plane.start, before_controllers=lambda config: apply_crd(client_for(config))))

            async def stop_plane() -> None:
                await asyncio.gather(starting, return_exceptions=True)  # start() cleans up after itself
                await asyncio.to_thread(plane.stop)
            teardown.append(("control plane", stop_plane))
            try:
                kubeconfig = await until(stop, asyncio.shield(starting))
            except ClusterError as exc:
                raise SandboxError(f"the control plane did not start: {exc}") from exc
            pids.extend(plane.pids().values())
        view.say(f"sandbox: kubeconfig {kubeconfig}  (try: kubectl --kubeconfig {kubeconfig} "
                 "get tis,deploy,rs,pods,endpointslices)")
        admin = client_for(kubeconfig)
        if plane is None:  # another's cluster: nothing of the sandbox's name there, and nothing left behind
            await until(stop, asyncio.to_thread(check_free, admin, ns, name, kubeconfig))

        # 2. The CRD (already there if the plane is ours) and the model store.
        crd_name = await until(stop, asyncio.to_thread(apply_crd, admin))
        claim, path = model_store(body)
        nodes = [f"sandbox-node-{i}" for i in range(scenario.nodes)]
        if plane is None:  # runs last: after the kubelets stopped (the CRD stays, as Helm leaves it)
            pv_of = model_store_volume(ns, claim)
            teardown.append(("Nodes, claim and volume in the cluster", lambda: asyncio.to_thread(
                remove_sandbox_objects, admin, ns, name if made_service else None, claim, pv_of, nodes)))
        pv = await until(stop, asyncio.to_thread(provision_model_store, admin, workdir / "model-store", ns, claim,
                                                 path))
        view.say(f"sandbox: CRD {crd_name} established; claim {ns}/{claim} bound to {pv} "
                 f"({workdir / 'model-store'}, the cost model at {path}/1/model.py)")

        # 3. Prometheus, scraping what the kubelets write into file_sd, as often as the autoscaler ticks.
        scrape_s = scrape_interval_s(config)
        prom = prometheus_runtime.PrometheusServer(workdir / "prometheus", scrape_interval_s=scrape_s)
        prom.start()
        if prom.pid:
            pids.append(prom.pid)
        teardown.append(("Prometheus", lambda: asyncio.to_thread(prom.stop, 5.0)))
        if not await until(stop, prom.wait_ready(30)):
            raise SandboxError(f"Prometheus did not become ready; its log:\n{prom.read_log()[-2000:]}")
        view.say(f"sandbox: Prometheus {prom.url} (scrape {scrape_s:g} s, file_sd {prom.targets_path})")

        # 4. The kubelets.
        network, targets = PodNetwork(), ScrapeTargets(prom)
        resources = machine_resources(scenario.gpus_per_node, scenario.nodes)
        for i, node in enumerate(nodes):
            identity = (plane.kubeconfig_for(f"system:node:{node}", ["system:nodes"]) if plane is not None
                        else kubeconfig)
            kubelet = Kubelet(client_for(identity), workdir, node_name=node, node_index=i, resources=resources,
                              network=network, targets=targets, on_event=on_kubelet_event)
            kubelets.append(kubelet)
            teardown.append((f"kubelet {node} and its tritonservers", kubelet.stop))
            await until(stop, kubelet.start())
        view.say(f"sandbox: {scenario.nodes} Node(s) registered, each with cpu {resources.cpu}, "
                 f"nvidia.com/gpu {resources.gpus} (tritonservers it runs; --gpus to change)")
        router = ServiceRouter(admin, ns, name, network).start()
        teardown.append(("Service router", lambda: asyncio.to_thread(router.stop)))

        # 5. The operator.
        operator = OperatorProcess(kubeconfig, workdir / "operator.log", ["--prometheus-url", prom.url]).start()
        if operator.pid:
            pids.append(operator.pid)
        teardown.append(("operator", lambda: asyncio.to_thread(operator.stop)))
        view.say(f"sandbox: operator running (pid {operator.pid})")

        # 6. The InferenceService; wait for the warm floor: Ready, routed to and scraped.
        reader = ClusterReader(admin, ns, name)
        await until(stop, asyncio.to_thread(reader.custom.create_namespaced_custom_object,
                                            GROUP, VERSION, ns, PLURAL, body))
        made_service = True
        if plane is None:  # the sandbox's own now (a 409 raised above); runs first: its pods go while kubelets run
            teardown.append((f"InferenceService {ns}/{name} in the cluster", lambda: asyncio.to_thread(
                remove_service, admin, ns, name)))
        view.say(f"sandbox: created InferenceService {ns}/{name}; waiting for {config['floor']} ready replica(s)")

        async def deployment_exists() -> bool:
            return await asyncio.to_thread(reader.deployment) is not None
        deadline = time.monotonic() + DEPLOYMENT_TIMEOUT_S
        while not await until(stop, deployment_exists()):
            if not operator.alive() or time.monotonic() > deadline:
                raise SandboxError(f"the operator created no Deployment {ns}/{name} "
                                   f"(alive: {operator.alive()}); its log:\n{operator.log_tail()}")
            await until(stop, asyncio.sleep(0.2))
        ready = await poll(stop, lambda: len(router.backends()) >= config["floor"] or not operator.alive(),
                           FIRST_READY_TIMEOUT_S)
        if not ready or not operator.alive():
            logs = sorted(workdir.glob("pods/*/*/*.log"))
            tails = "\n".join(f"{p}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs[:2])
            import kubernetes

            pending = await asyncio.to_thread(unscheduled, kubernetes.client.CoreV1Api(admin), ns, name)
            raise SandboxError(f"no ready endpoint of {name} after {FIRST_READY_TIMEOUT_S:.0f} s; operator alive: "
                               f"{operator.alive()}" + (f"; {pending}" if pending else "") +
                               f"; pod logs:\n{tails or '(no pod started)'}\noperator log:\n{operator.log_tail(1500)}")
        for kubelet in kubelets:
            for worker in kubelet.pods_of(ns, name):
                address = worker.host_address("metrics")
                if address and not await until(stop, prom.wait_target_up(address, TARGET_UP_TIMEOUT_S)):
                    raise SandboxError(f"Prometheus never scraped {worker.name} at {address}; "
                                       f"its log:\n{prom.read_log()[-2000:]}")
        slices = ", ".join(f"{a}:{p}" for a, p in router.endpoints())
        view.say(f"sandbox: {name} ready, in its EndpointSlices ({slices})"
                 f" and scraped after {time.monotonic() - wall0:.1f} s; starting the load")

        # 7. The load, the live view and (optionally) a crash.
        t0 = time.perf_counter()
        load_task = asyncio.create_task(loadgen.run_load(
            router.backends, model, shape.arrivals, on_result=lambda rec: recorder.on_result(rec, load_t()),
            timeout_s=scenario.request_timeout_s))

        async def record() -> None:
            nonlocal operator_exited_at
            desired, ready, p95 = config["floor"], 0, None
            restarts: dict[str, int] = {}
            tuned: set[str] = set()
            tick = 1
            while True:
                await asyncio.sleep(max(0.0, t0 + tick - time.perf_counter()))
                if operator_exited_at is None and not operator.alive():  # the run measures nothing after
                    operator_exited_at = load_t()
                    code = operator.proc.returncode if operator.proc else None
                    text = (f"the operator (pid {operator.pid}) exited during the load, exit code {code}: nothing "
                            f"autoscales the service after this (its log: {operator.log_path})")
                    recorder.add_mark(operator_exited_at, "operatorExited", text)
                    view.note(text)
                try:
                    got, ready, p95, scaled = await asyncio.to_thread(reader.read)
                    desired = got if got is not None else desired
                    for uid, reason, message in scaled:
                        if reason == "BatchingTuned":  # the tuner's change, rolled out to the pods
                            if uid not in tuned:
                                tuned.add(uid)
                                view.note(recorder.add_mark(load_t(), "batchingTuned", message).text)
                            continue
                        ev = recorder.add_scale_event(uid, load_t(), message)
                        if ev is not None:
                            view.note(ev.text)
                    for pod, count in (await asyncio.to_thread(reader.restart_counts)).items():
                        if count > restarts.get(pod, 0):
                            recorder.add_mark(load_t(), "restartCount", f"{pod} restartCount {count} in its status")
                        restarts[pod] = count
                except Exception as exc:  # the view must survive an API hiccup
                    view.note(f"(reading the cluster failed: {exc.__class__.__name__})")
                view.show(recorder.take_sample(load_t(), ready, desired, p95))
                tick += 1

        async def chaos() -> None:
            assert scenario.kill_at_s is not None
            await asyncio.sleep(max(0.0, t0 + scenario.kill_at_s - time.perf_counter()))
            for kubelet in kubelets:
                try:
                    pod = kubelet.kill(ns, name)
                except LookupError:
                    continue
                recorder.add_mark(load_t(), "killed", f"killed {pod}'s tritonserver (SIGKILL)")
                view.note(f"killed {pod} (SIGKILL)")
                return
            view.note("kill skipped: no ready pod")

        side = [asyncio.create_task(record())]
        if scenario.kill_at_s is not None:
            side.append(asyncio.create_task(chaos()))
        try:
            await until(stop, asyncio.shield(load_task))
        finally:
            for task in side:
                task.cancel()
            if not load_task.done():
                load_task.cancel()
            await asyncio.gather(load_task, *side, return_exceptions=True)
        if not recorder.samples or recorder.samples[-1].t < load_t() - 0.5:
            try:
                desired, ready, p95, _ = await asyncio.to_thread(reader.read)
            except Exception:
                last = recorder.samples[-1] if recorder.samples else None
                desired, ready, p95 = (last.desired if last else None), (last.ready if last else 0), None
            view.show(recorder.take_sample(load_t(), ready, desired or 0, p95))
    except Stopped:
        interrupted = True
    except BaseException:  # SandboxError, a bug, or cancellation: tear down, keep the logs, re-raise
        failed = True
        raise
    finally:
        interrupted = interrupted or stop.is_set()
        if teardown:
            view.say("sandbox: stopping: " + ", ".join(n for n, _ in reversed(teardown)))
        for what, fn in reversed(teardown):
            try:
                await asyncio.wait_for(fn(), TEARDOWN_STEP_S)
            except Exception as exc:
                view.say(f"sandbox: stopping the {what} failed: {exc!r}")
        for kubelet in kubelets:
            pids.extend(kubelet.started_pids)
        leftovers = [p for p in pids if group_alive(p)]
        if leftovers:
            view.say(f"sandbox: processes still running after teardown: {leftovers}")
        if temp_workdir and not failed and not leftovers and not interrupted and operator_exited_at is None:
            shutil.rmtree(workdir, ignore_errors=True)

    summary = build_summary(
        records=recorder.records, samples=recorder.samples, scale_events=recorder.scale_events,
        marks=recorder.marks, phases=shape.phases, restarts=sum(k.restarts for k in kubelets),
        cold_starts_s=[c for k in kubelets for c in k.cold_starts_s], config=config,
        scenario={"load": scenario.load, "description": shape.description, "duration_s": scenario.duration_s,
                  "rate_scale": scenario.rate_scale, "seed": scenario.seed, "kill_at_s": scenario.kill_at_s,
                  "nodes": scenario.nodes, "gpus_per_node": kubelets[0].resources.gpus if kubelets else None,
                  "title": f"tritonscale sandbox: {shape.description}, {name} "
                           f"(a={config['cost_base_ms']:g} ms, b={config['cost_per_item_ms']:g} ms, "
                           f"batch<={config['max_batch_size']}), target p95 {config['target_p95_ms']:g} ms"},
        interrupted=interrupted, wall_s=time.monotonic() - wall0,
    )
    summary["leftover_processes"] = leftovers
    summary["operator_exited_at_s"] = operator_exited_at
    return SandboxResult(summary, recorder, shape, config, interrupted, workdir, kubeconfig, pids, leftovers)
