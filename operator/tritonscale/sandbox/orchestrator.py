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
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.kube.client import client_for
from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox.cluster_reader import ClusterReader, unscheduled
from tritonscale.sandbox.cluster_setup import (
    apply_crd,
    check_free,
    model_store_volume,
    provision_model_store,
    remove_sandbox_objects,
    remove_service,
)
from tritonscale.sandbox.kubelet import Kubelet, ScrapeTargets
from tritonscale.sandbox.live_view import LiveView, Recorder, Sample, ScaleEvent
from tritonscale.sandbox.load_phase import LoadPhase
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
from tritonscale.sandbox.stoppable_waits import Stopped, poll, until
from tritonscale.sandbox.summary import build_summary

if TYPE_CHECKING:
    from tritonscale.cluster import ControlPlane

# Startup budgets. With the operator's probes (startup and readiness every 5 s) the first
# replica is Ready 5-10 s after the Deployment appears; Prometheus sees a new file_sd
# target ~5 s after it is written. A fresh machine builds the control plane first:
# that has no budget here (the build prints its own progress).
DEPLOYMENT_TIMEOUT_S = 60.0
FIRST_READY_TIMEOUT_S = 120.0
TARGET_UP_TIMEOUT_S = 30.0
TEARDOWN_STEP_S = 30.0


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


class _Run(LoadPhase):
    """One sandbox run: the parts it started (each with its teardown, stopped in reverse), the recorder,
    and the phases of ``run_sandbox`` as methods, in order (the load's in ``load_phase.LoadPhase``)."""

    def __init__(self, scenario: Scenario, stop: asyncio.Event, view: LiveView | None) -> None:
        self.scenario, self.stop = scenario, stop
        self.wall0 = time.monotonic()
        self.body = load_service(scenario)
        self.config = config = describe_config(self.body)
        self.shape = build_load(scenario)
        self.ns, self.name, self.model = config["namespace"], config["inferenceservice"], config["model"]
        self.view = view or LiveView(config["target_p95_ms"])
        self.recorder = Recorder(self.shape.arrivals, config["target_p95_ms"])
        self.temp_workdir = scenario.workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="tritonscale-sandbox-")) if scenario.workdir is None \
            else Path(scenario.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.pids: list[int] = []
        self.teardown: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
        self.made_service = False  # the InferenceService is the sandbox's (created by it): its pods may be removed
        self.operator_exited_at: float | None = None  # load time at which the operator was first seen gone
        self.kubelets: list[Kubelet] = []
        self.interrupted = self.failed = False
        self.kubeconfig: Path | None = None
        self.plane: ControlPlane | None = None  # the control plane the sandbox started; None with --kubeconfig
        self.t0: float | None = None  # perf_counter at the start of the load
        self.leftovers: list[int] = []

    def announce(self) -> None:
        config, view = self.config, self.view
        view.say(f"sandbox: {self.shape.description} for {self.scenario.duration_s:g} s against {self.name} "
                 f"(a {config['cost_base_ms']:g} ms + b {config['cost_per_item_ms']:g} ms x n, batch <= "
                 f"{config['max_batch_size']}, ~{config['replica_capacity_rps']:g} rps per replica; "
                 f"target p95 {config['target_p95_ms']:g} ms, "
                 f"replicas {config['min_replicas']}..{config['max_replicas']})")
        view.say(f"sandbox: logs in {self.workdir}" + (" (removed after a clean run; keep them with --workdir)"
                                                      if self.temp_workdir else ""))

    async def start_control_plane(self) -> Any:
        """1. The control plane (or the cluster of --kubeconfig); returns an admin client."""
        stop, view = self.stop, self.view
        if self.scenario.kubeconfig is not None:
            self.kubeconfig = Path(self.scenario.kubeconfig)
            view.say(f"sandbox: using the cluster of {self.kubeconfig}")
        else:
            from tritonscale.cluster import ClusterError, ControlPlane

            plane = self.plane = ControlPlane(self.workdir / "control-plane",
                                              progress=lambda line: view.say(f"sandbox: {line}"))
            # The CRD goes in before kube-controller-manager starts, so its garbage collector
            # knows InferenceServices from its first discovery (it rediscovers every 30 s).
            starting = asyncio.ensure_future(asyncio.to_thread(
                plane.start, before_controllers=lambda config: apply_crd(client_for(config))))

            async def stop_plane() -> None:
                await asyncio.gather(starting, return_exceptions=True)  # start() cleans up after itself
                await asyncio.to_thread(plane.stop)
            self.teardown.append(("control plane", stop_plane))
            try:
                self.kubeconfig = await until(stop, asyncio.shield(starting))
            except ClusterError as exc:
                raise SandboxError(f"the control plane did not start: {exc}") from exc
            self.pids.extend(plane.pids().values())
        view.say(f"sandbox: kubeconfig {self.kubeconfig}  (try: kubectl --kubeconfig {self.kubeconfig} "
                 "get tis,deploy,rs,pods,endpointslices)")
        admin = client_for(self.kubeconfig)
        if self.plane is None:  # another's cluster: nothing of the sandbox's name there, and nothing left behind
            await until(stop, asyncio.to_thread(check_free, admin, self.ns, self.name, self.kubeconfig))
        return admin

    async def prepare_cluster(self, admin: Any) -> None:
        """2. The CRD (already there if the plane is ours) and the model store."""
        stop, ns = self.stop, self.ns
        crd_name = await until(stop, asyncio.to_thread(apply_crd, admin))
        claim, path = model_store(self.body)
        nodes = self.node_names()
        if self.plane is None:  # runs last: after the kubelets stopped (the CRD stays, as Helm leaves it)
            pv_of = model_store_volume(ns, claim)
            self.teardown.append(("Nodes, claim and volume in the cluster", lambda: asyncio.to_thread(
                remove_sandbox_objects, admin, ns, self.name if self.made_service else None, claim, pv_of, nodes)))
        pv = await until(stop, asyncio.to_thread(provision_model_store, admin, self.workdir / "model-store", ns,
                                                 claim, path))
        self.view.say(f"sandbox: CRD {crd_name} established; claim {ns}/{claim} bound to {pv} "
                      f"({self.workdir / 'model-store'}, the cost model at {path}/1/model.py)")

    def node_names(self) -> list[str]:
        return [f"sandbox-node-{i}" for i in range(self.scenario.nodes)]

    async def start_prometheus(self) -> prometheus_runtime.PrometheusServer:
        """3. Prometheus, scraping what the kubelets write into file_sd, as often as the autoscaler ticks."""
        scrape_s = scrape_interval_s(self.config)
        prom = prometheus_runtime.PrometheusServer(self.workdir / "prometheus", scrape_interval_s=scrape_s)
        prom.start()
        if prom.pid:
            self.pids.append(prom.pid)
        self.teardown.append(("Prometheus", lambda: asyncio.to_thread(prom.stop, 5.0)))
        if not await until(self.stop, prom.wait_ready(30)):
            raise SandboxError(f"Prometheus did not become ready; its log:\n{prom.read_log()[-2000:]}")
        self.view.say(f"sandbox: Prometheus {prom.url} (scrape {scrape_s:g} s, file_sd {prom.targets_path})")
        return prom

    async def start_kubelets(self, admin: Any, prom: prometheus_runtime.PrometheusServer) -> ServiceRouter:
        """4. The kubelets, and the router that sends the load to the Service's ready endpoints."""
        network, targets = PodNetwork(), ScrapeTargets(prom)
        resources = machine_resources(self.scenario.gpus_per_node, self.scenario.nodes)
        for i, node in enumerate(self.node_names()):
            identity: Path | None = (self.plane.kubeconfig_for(f"system:node:{node}", ["system:nodes"])
                                     if self.plane is not None else self.kubeconfig)
            assert identity is not None
            kubelet = Kubelet(client_for(identity), self.workdir, node_name=node, node_index=i, resources=resources,
                              network=network, targets=targets, on_event=self.on_kubelet_event)
            self.kubelets.append(kubelet)
            self.teardown.append((f"kubelet {node} and its tritonservers", kubelet.stop))
            await until(self.stop, kubelet.start())
        self.view.say(f"sandbox: {self.scenario.nodes} Node(s) registered, each with cpu {resources.cpu}, "
                      f"nvidia.com/gpu {resources.gpus} (tritonservers it runs; --gpus to change)")
        router = ServiceRouter(admin, self.ns, self.name, network).start()
        self.teardown.append(("Service router", lambda: asyncio.to_thread(router.stop)))
        return router

    def start_operator(self, prom: prometheus_runtime.PrometheusServer) -> OperatorProcess:
        """5. The operator."""
        assert self.kubeconfig is not None
        operator = OperatorProcess(self.kubeconfig, self.workdir / "operator.log",
                                   ["--prometheus-url", prom.url]).start()
        if operator.pid:
            self.pids.append(operator.pid)
        self.teardown.append(("operator", lambda: asyncio.to_thread(operator.stop)))
        self.view.say(f"sandbox: operator running (pid {operator.pid})")
        return operator

    async def create_service(self, admin: Any, reader: ClusterReader, operator: OperatorProcess,
                             router: ServiceRouter, prom: prometheus_runtime.PrometheusServer) -> None:
        """6. The InferenceService; wait for the warm floor: Ready, routed to and scraped."""
        stop, ns, name, config = self.stop, self.ns, self.name, self.config
        await until(stop, asyncio.to_thread(reader.custom.create_namespaced_custom_object,
                                            GROUP, VERSION, ns, PLURAL, self.body))
        self.made_service = True
        if self.plane is None:  # the sandbox's own now (a 409 raised above); runs first: its pods go while kubelets run
            self.teardown.append((f"InferenceService {ns}/{name} in the cluster", lambda: asyncio.to_thread(
                remove_service, admin, ns, name)))
        self.view.say(f"sandbox: created InferenceService {ns}/{name}; waiting for {config['floor']} ready replica(s)")

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
            logs = sorted(self.workdir.glob("pods/*/*/*.log"))
            tails = "\n".join(f"{p}:\n{p.read_text(errors='replace')[-1500:]}" for p in logs[:2])
            pending = await asyncio.to_thread(unscheduled, reader.core, ns, name)
            raise SandboxError(f"no ready endpoint of {name} after {FIRST_READY_TIMEOUT_S:.0f} s; operator alive: "
                               f"{operator.alive()}" + (f"; {pending}" if pending else "") +
                               f"; pod logs:\n{tails or '(no pod started)'}\noperator log:\n{operator.log_tail(1500)}")
        for kubelet in self.kubelets:
            for worker in kubelet.pods_of(ns, name):
                address = worker.host_address("metrics")
                if address and not await until(stop, prom.wait_target_up(address, TARGET_UP_TIMEOUT_S)):
                    raise SandboxError(f"Prometheus never scraped {worker.name} at {address}; "
                                       f"its log:\n{prom.read_log()[-2000:]}")
        slices = ", ".join(f"{a}:{p}" for a, p in router.endpoints())
        self.view.say(f"sandbox: {name} ready, in its EndpointSlices ({slices})"
                      f" and scraped after {time.monotonic() - self.wall0:.1f} s; starting the load")

    async def bring_up_and_load(self) -> None:
        admin = await self.start_control_plane()
        await self.prepare_cluster(admin)
        prom = await self.start_prometheus()
        router = await self.start_kubelets(admin, prom)
        operator = self.start_operator(prom)
        reader = ClusterReader(admin, self.ns, self.name)
        await self.create_service(admin, reader, operator, router, prom)
        await self.run_load(reader, router, operator)

    async def tear_down(self) -> None:
        """Stop what started, in reverse; the work directory goes only after a clean run."""
        self.interrupted = self.interrupted or self.stop.is_set()
        view = self.view
        if self.teardown:
            view.say("sandbox: stopping: " + ", ".join(n for n, _ in reversed(self.teardown)))
        for what, fn in reversed(self.teardown):
            try:
                await asyncio.wait_for(fn(), TEARDOWN_STEP_S)
            except Exception as exc:
                view.say(f"sandbox: stopping the {what} failed: {exc!r}")
        for kubelet in self.kubelets:
            self.pids.extend(kubelet.started_pids)
        self.leftovers = [p for p in self.pids if group_alive(p)]
        if self.leftovers:
            view.say(f"sandbox: processes still running after teardown: {self.leftovers}")
        if (self.temp_workdir and not self.failed and not self.leftovers and not self.interrupted
                and self.operator_exited_at is None):
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif self.temp_workdir and self.workdir.is_dir() and not any(self.workdir.iterdir()):
            # Refused before anything started (a name taken on --kubeconfig's cluster): no log to keep.
            self.workdir.rmdir()

    def result(self) -> SandboxResult:
        scenario, config, kubelets = self.scenario, self.config, self.kubelets
        summary = build_summary(
            records=self.recorder.records, samples=self.recorder.samples, scale_events=self.recorder.scale_events,
            marks=self.recorder.marks, phases=self.shape.phases, restarts=sum(k.restarts for k in kubelets),
            cold_starts_s=[c for k in kubelets for c in k.cold_starts_s], config=config,
            scenario={"load": scenario.load, "description": self.shape.description,
                      "duration_s": scenario.duration_s, "rate_scale": scenario.rate_scale, "seed": scenario.seed,
                      "kill_at_s": scenario.kill_at_s, "nodes": scenario.nodes,
                      "gpus_per_node": kubelets[0].resources.gpus if kubelets else None,
                      "title": f"tritonscale sandbox: {self.shape.description}, {self.name} "
                               f"(a={config['cost_base_ms']:g} ms, b={config['cost_per_item_ms']:g} ms, "
                               f"batch<={config['max_batch_size']}), target p95 {config['target_p95_ms']:g} ms"},
            interrupted=self.interrupted, wall_s=time.monotonic() - self.wall0,
        )
        summary["leftover_processes"] = self.leftovers
        summary["operator_exited_at_s"] = self.operator_exited_at
        return SandboxResult(summary, self.recorder, self.shape, config, self.interrupted, self.workdir,
                             self.kubeconfig, self.pids, self.leftovers)


async def run_sandbox(scenario: Scenario, *, stop: asyncio.Event | None = None,
                      view: LiveView | None = None) -> SandboxResult:
    """Bring everything up, replay the load, tear everything down; return what was recorded.

    Setting ``stop`` ends the run early (what Ctrl-C does); the result then has
    ``interrupted`` True and covers what ran. Raises :class:`SandboxError` if a part
    fails to start (after tearing down what did start).
    """
    run = _Run(scenario, stop or asyncio.Event(), view)
    run.announce()
    try:
        await run.bring_up_and_load()
    except Stopped:
        run.interrupted = True
    except BaseException:  # SandboxError, a bug, or cancellation: tear down, keep the logs, re-raise
        run.failed = True
        raise
    finally:
        await run.tear_down()
    return run.result()
