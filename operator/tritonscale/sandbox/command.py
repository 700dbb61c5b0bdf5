"""``tritonscale sandbox``: the whole closed loop on one machine, with real parts.

    tritonscale sandbox [--duration 150] [--load step|burst|trace[:FILE]] [--rate-scale X]
                        [--summary FILE.json] [--plot FILE.png] [--kill-at SECONDS]

It brings up, in this order, and stops in reverse on exit, error, Ctrl-C or SIGTERM:

1. an emulated Kubernetes API (KMock, the InferenceService CRD registered);
2. a real Prometheus (Debian's package) scraping every replica through file_sd;
3. the node agent (``node_agent.py``): each Deployment replica becomes a real
   ``tritonserver`` process (the binary bundled in nvidia-pytriton) serving the
   operator-rendered config.pbtxt and the a + b*n cost model, reported ready only
   once Triton says the model is ready (after warmup);
4. the operator itself, ``tritonscale run``, as a subprocess pointed at both;
5. the InferenceService (``manifests/samples/python-cpu.yaml`` sized for a 2-core
   machine, see ``SANDBOX_SIZING``), then a load generator (tritonclient over HTTP,
   round-robin over ready replicas like a Service) replaying the load shape, with one
   line per second of live view.

At the end (also after Ctrl-C) it writes the JSON summary and the PNG plot of what
ran. ``add_arguments`` + ``run`` plug into the main CLI; ``run_sandbox`` is the same
loop for tests, returning the recorded timeline.

Exit codes: 0 completed; 1 something is missing or failed to start (one message on
stderr naming it and how to fix it, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import numpy as np
import yaml

import tritonscale
from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale import process_group
from tritonscale.sandbox import loadgen
from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox import tritonserver as triton_runtime
from tritonscale.sandbox.live_view import LiveView, Recorder, Sample, ScaleEvent
from tritonscale.sandbox.summary import Phase, build_summary, write_plot, write_summary

PACKAGE_ROOT = Path(tritonscale.__file__).resolve().parent.parent  # operator/
REPO = PACKAGE_ROOT.parent
SAMPLE = REPO / "manifests" / "samples" / "python-cpu.yaml"
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "azure-llm-conv-2023.csv"

# The sample sized so one replica saturates well below what a Python load generator
# pushes on 2 cores. A batch of n costs 20 + 15n ms and batches hold at most 4, so one
# replica serves at most 4 / 80 ms = 50 rps, and a lone request takes 35 ms. Measured
# on one replica: p95 ~100 ms at 10-23 rps, 180 ms at 35 rps, 390 ms at 45 rps. So the
# step's 70 rps high phase needs 2-3 replicas against the 200 ms target, and the 15 and
# 10 rps phases fit one at half the target. (With a = 40, b = 10 the same 50 rps
# ceiling came with p95 130-220 ms at 17 rps per replica: too close to the target to
# tell a good scale-up from a bad one.) Scaling ticks every 2 s on a 10 s rate window
# with a 20 s scale-down window, so a 150 s run shows both directions, even though
# Triton's p95 summary keeps a breach for up to 60 s.
SANDBOX_SIZING: dict[str, Any] = {
    "model": {
        "maxBatchSize": 4,
        "warmup": {"batchSizes": [1, 4]},
        "parameters": {"cost_base_ms": "20", "cost_per_item_ms": "15"},
    },
    "batching": {"maxQueueDelayMicroseconds": 2000, "preferredBatchSizes": [2, 4]},
    "scaling": {
        "minReplicas": 1,
        "maxReplicas": 4,
        "targetP95Milliseconds": 200,
        "intervalSeconds": 2,
        "windowSeconds": 10,
        "scaleDown": {"stabilizationSeconds": 20},
    },
}

# Load shapes (rates are multiplied by --rate-scale).
STEP_PHASES = (("base", 0.12, 15.0), ("high", 0.40, 70.0), ("low", 0.48, 10.0))  # share of --duration, rps
BURST = {"base_rps": 15.0, "burst_rps": 80.0, "period_s": 50.0, "burst_s": 12.0}
# The Azure trace averages 5.4 rps; x10 gives ~50 rps, one replica's capacity, with
# 5 s peaks near 60 rps.
TRACE_RATE_SCALE = 10.0

NAMESPACE = "default"
# Startup budgets. The first replica is ready ~3 s after the operator creates the
# Deployment; Prometheus sees a new file_sd target ~5-6 s after it is written.
OPERATOR_WATCH_TIMEOUT_S = 60.0
FIRST_READY_TIMEOUT_S = 120.0
TARGET_UP_TIMEOUT_S = 30.0


class SandboxError(Exception):
    """A part failed to start; the message says which and points at its log."""


class _Stopped(Exception):
    pass


# --------------------------------------------------------------------------- preflight


@dataclass(frozen=True)
class Missing:
    what: str
    fix: str


def _pip(requirement: str) -> str:
    return f"{sys.executable} -m pip install '{requirement}'"


def preflight(load: str = "step", need_plot: bool = False, service_file: Optional[Path] = None) -> list[Missing]:
    """What the sandbox needs and this machine lacks, each with the command that fixes it."""
    missing: list[Missing] = []
    try:
        triton_runtime.find_tritonserver()
    except RuntimeError as exc:
        missing.append(Missing(f"tritonserver binary, bundled in the nvidia-pytriton wheel ({str(exc).split(';')[0]})",
                               _pip("nvidia-pytriton==0.7.0")))
    try:
        prometheus_runtime.find_prometheus()
    except RuntimeError:
        sudo = "" if os.geteuid() == 0 else "sudo "
        missing.append(Missing("prometheus binary (Debian package 'prometheus'), not on PATH nor in /usr/bin",
                               f"{sudo}apt-get install -y prometheus"))
    modules = [("kmock", "kmock==0.8", "kmock (the emulated Kubernetes API)"),
               ("kubernetes", "kubernetes>=29", "kubernetes (the Python client)"),
               ("tritonclient", "tritonclient[http]>=2.40", "tritonclient (the load generator)"),
               ("aiohttp", "tritonclient[http]>=2.40", "aiohttp (tritonclient's asyncio HTTP transport)")]
    if need_plot:
        modules.append(("matplotlib", "matplotlib>=3.8", "matplotlib (for --plot)"))
    for module, requirement, what in modules:
        if importlib.util.find_spec(module) is None:
            missing.append(Missing(f"Python package {what}", _pip(requirement)))
    kind, _, arg = load.partition(":")
    if kind == "trace":
        trace = Path(arg) if arg else DEFAULT_TRACE
        if not trace.is_file():
            missing.append(Missing(f"trace file {trace}",
                                   "pass --load trace:FILE, a CSV with a TIMESTAMP column or one arrival per line "
                                   "(the Azure LLM trace is ../shared/data/azure-llm-conv-2023.csv next to the repo)"))
    sf = service_file or SAMPLE
    if not sf.is_file():
        missing.append(Missing(f"InferenceService file {sf}",
                               "run from a clone of the repository, or pass --service FILE"))
    return missing


def format_missing(missing: list[Missing]) -> str:
    lines = ["tritonscale sandbox: cannot start; missing:"]
    for m in missing:
        lines += [f"  - {m.what}", f"      fix: {m.fix}"]
    lines.append(f"Or install everything at once: {REPO / '.ci' / 'setup'} (from a clone of the repository).")
    return "\n".join(lines)


# --------------------------------------------------------------------------- scenario


@dataclass
class Scenario:
    duration_s: float = 150.0
    load: str = "step"  # step | burst | trace[:FILE]
    rate_scale: Optional[float] = None  # None: 1 for step/burst, TRACE_RATE_SCALE for a trace
    seed: int = 0
    service_file: Optional[Path] = None  # None: the python-cpu sample with SANDBOX_SIZING
    kill_at_s: Optional[float] = None  # SIGKILL one ready tritonserver at this time
    step_phases: Optional[list[tuple[str, float, float]]] = None  # (name, seconds, rps): overrides the step
    workdir: Optional[Path] = None  # None: a temporary directory, removed after a clean run
    request_timeout_s: float = 30.0


@dataclass
class LoadShape:
    arrivals: np.ndarray
    phases: list[Phase]
    description: str


def build_load(scenario: Scenario) -> LoadShape:
    kind, _, arg = scenario.load.partition(":")
    d = float(scenario.duration_s)
    if kind == "step":
        scale = scenario.rate_scale or 1.0
        spec = scenario.step_phases or [(n, share * d, rps) for n, share, rps in STEP_PHASES]
        phases, t = [], 0.0
        for name, seconds, rps in spec:
            phases.append(Phase(name, t, t + seconds, rps * scale))
            t += seconds
        arrivals = loadgen.step_schedule([(p.end_s - p.start_s, p.rps) for p in phases], seed=scenario.seed)
        desc = "step " + " -> ".join(f"{p.rps:g}" for p in phases) + " rps"
        return LoadShape(arrivals, phases, desc)
    if kind == "burst":
        scale = scenario.rate_scale or 1.0
        b = BURST
        arrivals = loadgen.burst_schedule(b["base_rps"] * scale, b["burst_rps"] * scale, b["period_s"],
                                          b["burst_s"], d, seed=scenario.seed)
        phases, t = [], 0.0
        while t < d:
            for name, length, rps in (("base", b["period_s"] - b["burst_s"], b["base_rps"]),
                                      ("burst", b["burst_s"], b["burst_rps"])):
                end = min(d, t + length)
                if end > t:
                    phases.append(Phase(name, t, end, rps * scale))
                t = end
        desc = (f"burst {b['base_rps'] * scale:g} rps with {b['burst_s']:g} s at {b['burst_rps'] * scale:g} rps "
                f"every {b['period_s']:g} s")
        return LoadShape(arrivals, phases, desc)
    if kind == "trace":
        path = Path(arg) if arg else DEFAULT_TRACE
        scale = scenario.rate_scale or TRACE_RATE_SCALE
        arrivals = loadgen.trace_schedule(path, rate_scale=scale, duration_s=d)
        thirds = [(0.0, d / 3), (d / 3, 2 * d / 3), (2 * d / 3, d)]
        phases = [Phase(f"{a:.0f}-{b:.0f}s", a, b) for a, b in thirds]
        return LoadShape(arrivals, phases, f"trace {path.name} x{scale:g} ({len(arrivals) / d:.1f} rps mean)")
    raise ValueError(f"--load must be step, burst or trace[:FILE], not {scenario.load!r}")


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v)
        return out
    return copy.deepcopy(over)


def load_service(scenario: Scenario) -> dict[str, Any]:
    """The InferenceService the sandbox creates, validated; SandboxError if unusable."""
    from tritonscale.api.validation import validate_body

    path = scenario.service_file or SAMPLE
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    body = next((d for d in docs if d.get("kind") == "InferenceService"), None)
    if body is None:
        raise SandboxError(f"{path}: no InferenceService document")
    if scenario.service_file is None:
        body["spec"] = _merge(body["spec"], SANDBOX_SIZING)
    body.setdefault("metadata", {})["namespace"] = NAMESPACE
    spec, problems = validate_body(body)
    if spec is None or problems:
        raise SandboxError(f"{path}: invalid InferenceService: " + "; ".join(str(p) for p in problems))
    if spec.model.backend != "python" or spec.runtime.gpus != 0:
        raise SandboxError(f"{path}: the sandbox runs the python cost model on CPU: "
                           "spec.model.backend must be python and spec.runtime.gpus 0")
    names = {t.name for t in spec.model.inputs}
    if spec.model.inputs and names != {"x"}:
        raise SandboxError(f"{path}: the cost model takes one FP32 input 'x' with dims [4]; got {sorted(names)}")
    return body


def describe_config(body: dict[str, Any]) -> dict[str, Any]:
    from tritonscale.api.validation import validate_body
    from tritonscale.render.triton_config import model_name

    spec, _ = validate_body(body)
    assert spec is not None
    a = float(spec.model.parameters.get("cost_base_ms", 20))
    b = float(spec.model.parameters.get("cost_per_item_ms", 2))
    n = max(1, spec.model.max_batch_size)
    batching = spec.batching
    s = spec.scaling
    return {
        "inferenceservice": body["metadata"]["name"],
        "namespace": body["metadata"]["namespace"],
        "model": model_name(spec, body["metadata"]["name"]),
        "cost_base_ms": a,
        "cost_per_item_ms": b,
        "max_batch_size": spec.model.max_batch_size,
        "preferred_batch_sizes": list(batching.preferred_batch_sizes) if batching and batching.enabled else [],
        "max_queue_delay_us": batching.max_queue_delay_microseconds if batching and batching.enabled else None,
        "warmup_batch_sizes": list(spec.model.warmup.batch_sizes) if spec.model.warmup else [],
        # Full batches back to back: n requests every a + b*n ms.
        "replica_capacity_rps": round(n / (a + b * n) * 1000.0, 1),
        "target_p95_ms": s.target_p95_milliseconds,
        "min_replicas": s.min_replicas,
        "max_replicas": s.max_replicas,
        "floor": s.floor,
        "interval_s": s.interval_seconds,
        "window_s": s.window_seconds,
        "scale_down_stabilization_s": s.scale_down.stabilization_seconds,
        "scale_up_max_step": s.scale_up.max_step,
        "panic_threshold": s.panic_threshold,
    }


# --------------------------------------------------------------------------- operator process


class OperatorProcess:
    """``tritonscale run`` as a subprocess in its own session, like the in-cluster Pod."""

    def __init__(self, kubeconfig: Path, prometheus_url: str, log_path: Path) -> None:
        self.log_path = log_path
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        env.pop("KUBERNETES_SERVICE_HOST", None)  # never fall back to in-cluster credentials
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH")) if p)
        self.cmd = [sys.executable, "-m", "tritonscale", "run", "--prometheus-url", prometheus_url,
                    "--metrics-port", "0", "--liveness-port", "0"]
        self.env = env
        self.proc: Optional[subprocess.Popen] = None
        self._log: Any = None

    def start(self) -> "OperatorProcess":
        self.proc, self._log = process_group.spawn(self.cmd, log_path=self.log_path, env=self.env)
        process_group.register(self)
        return self

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None:
            process_group.stop_group(self.proc, timeout)
        if self._log is not None:
            self._log.close()
            self._log = None
        process_group.unregister(self)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


# --------------------------------------------------------------------------- the run


@dataclass
class SandboxResult:
    summary: dict[str, Any]
    recorder: Recorder
    shape: LoadShape
    config: dict[str, Any]
    interrupted: bool
    workdir: Path
    pids: list[int] = field(default_factory=list)  # every process (group) started
    leftover_pids: list[int] = field(default_factory=list)  # groups still alive after teardown

    @property
    def samples(self) -> list[Sample]:
        return self.recorder.samples

    @property
    def scale_events(self) -> list[ScaleEvent]:
        return self.recorder.scale_events


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _api_client(kubeconfig: Path) -> Any:
    import kubernetes

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=cfg)
    return kubernetes.client.ApiClient(cfg)


async def _until(stop: asyncio.Event, awaitable: Awaitable[Any]) -> Any:
    """Await ``awaitable`` unless ``stop`` is set first (then raise _Stopped)."""
    task = asyncio.ensure_future(awaitable)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Stopped()
    return task.result()


async def _poll(stop: asyncio.Event, predicate: Callable[[], Any], timeout: float, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await _until(stop, asyncio.sleep(interval))
    return None


async def run_sandbox(scenario: Scenario, *, stop: Optional[asyncio.Event] = None,
                      view: Optional[LiveView] = None) -> SandboxResult:
    """Bring everything up, replay the load, tear everything down; return what was recorded.

    Setting ``stop`` ends the run early (what Ctrl-C does); the result then has
    ``interrupted`` True and covers what ran. Raises :class:`SandboxError` if a part
    fails to start (after tearing down what did start).
    """
    from tritonscale.sandbox.kubernetes_api import EmulatedCluster
    from tritonscale.sandbox.node_agent import AgentEvent, KubernetesClusterClient, NodeAgent

    stop = stop or asyncio.Event()
    wall0 = time.monotonic()
    body = load_service(scenario)
    config = describe_config(body)
    shape = build_load(scenario)
    ns, name, model = config["namespace"], config["inferenceservice"], config["model"]
    view = view or LiveView(config["target_p95_ms"])
    recorder = Recorder(shape.arrivals, config["target_p95_ms"])

    temp_workdir = scenario.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="tritonscale-sandbox-")) if temp_workdir else Path(scenario.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    view.say(f"sandbox: {shape.description} for {scenario.duration_s:g} s against {name} "
             f"(a {config['cost_base_ms']:g} ms + b {config['cost_per_item_ms']:g} ms x n, batch <= "
             f"{config['max_batch_size']}, ~{config['replica_capacity_rps']:g} rps per replica; "
             f"target p95 {config['target_p95_ms']:g} ms, replicas {config['min_replicas']}..{config['max_replicas']})")
    view.say(f"sandbox: logs in {workdir}" + (" (removed after a clean run; keep them with --workdir)"
                                             if temp_workdir else ""))

    pids: list[int] = []
    teardown: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    interrupted = False
    failed = False
    t0: Optional[float] = None  # perf_counter at the start of the load

    def load_t() -> float:
        return time.perf_counter() - t0 if t0 is not None else 0.0

    def on_agent_event(ev: AgentEvent) -> None:
        if ev.kind in ("started", "stopped"):
            text = ev.message.split(" (")[0]
        else:
            text = ev.message
        if t0 is None:
            view.say(f"sandbox: {text}")
            return
        if ev.kind in ("crashed", "restarted", "ready", "start-failed"):
            recorder.add_mark(load_t(), ev.kind, ev.message)
        view.note(text)

    agent: Optional[NodeAgent] = None
    operator: Optional[OperatorProcess] = None
    try:
        # 1. Emulated Kubernetes API.
        cluster = EmulatedCluster().start()
        teardown.append(("emulated API", lambda: asyncio.to_thread(cluster.stop)))
        kubeconfig = Path(cluster.write_kubeconfig(str(workdir / "kubeconfig")))
        view.say(f"sandbox: emulated Kubernetes API (KMock) at {cluster.url}")

        # 2. Prometheus, scraping what the node agent writes into file_sd.
        prom = prometheus_runtime.PrometheusServer(workdir / "prometheus", scrape_interval_s=1.0)
        prom.start()
        if prom.pid:
            pids.append(prom.pid)
        teardown.append(("Prometheus", lambda: asyncio.to_thread(prom.stop, 5.0)))
        if not await _until(stop, prom.wait_ready(30)):
            raise SandboxError(f"Prometheus did not become ready; its log:\n{prom.read_log()[-2000:]}")
        view.say(f"sandbox: Prometheus {prom.url} (scrape 1 s, file_sd {prom.targets_path})")

        # 3. The node agent.
        agent = NodeAgent(KubernetesClusterClient(_api_client(kubeconfig)), workdir, prom, on_event=on_agent_event)
        agent_stop = asyncio.Event()
        agent_task = asyncio.create_task(agent.run(agent_stop))

        async def stop_agent() -> None:
            agent_stop.set()
            await asyncio.gather(agent_task, return_exceptions=True)
            await agent.shutdown()
        teardown.append(("node agent and its tritonservers", stop_agent))

        # 4. The operator.
        operator = OperatorProcess(kubeconfig, prom.url, workdir / "operator.log").start()
        if operator.pid:
            pids.append(operator.pid)
        teardown.append(("operator", lambda: asyncio.to_thread(operator.stop)))
        api = cluster.api
        watching = await _poll(stop, lambda: not operator.alive() or any(
            c.resource == PLURAL and c.verb == "watch" for c in list(api.calls)), OPERATOR_WATCH_TIMEOUT_S)
        if not operator.alive() or not watching:
            raise SandboxError(f"the operator (tritonscale run) did not start watching; its log:\n"
                               f"{operator.log_tail()}")
        view.say(f"sandbox: operator running (pid {operator.pid}), watching {PLURAL}")

        # 5. The InferenceService, then wait for the warm floor to be ready and scraped.
        import kubernetes

        client = _api_client(kubeconfig)
        custom = kubernetes.client.CustomObjectsApi(client)
        apps = kubernetes.client.AppsV1Api(client)
        core = kubernetes.client.CoreV1Api(client)
        await asyncio.to_thread(custom.create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body)
        view.say(f"sandbox: created InferenceService {ns}/{name}; waiting for {config['floor']} ready replica(s)")
        ready = await _poll(stop, lambda: agent.ready_count(ns, name) >= config["floor"] or
                            not operator.alive(), FIRST_READY_TIMEOUT_S)
        if not ready or not operator.alive():
            logs = sorted(workdir.glob("pods/*/*/tritonserver.log"))
            tail = logs[0].read_text(errors="replace")[-2000:] if logs else "(no tritonserver started)"
            raise SandboxError(f"no ready replica of {name} after {FIRST_READY_TIMEOUT_S:.0f} s; "
                               f"operator alive: {operator.alive()}; tritonserver log:\n{tail}\n"
                               f"operator log:\n{operator.log_tail(1500)}")
        wl = agent.workload(ns, name)
        for pod in (wl.live if wl else []):
            if not await _until(stop, prom.wait_target_up(pod.process.metrics_address, TARGET_UP_TIMEOUT_S)):
                raise SandboxError(f"Prometheus never scraped {pod.name} at {pod.process.metrics_address}; "
                                   f"its log:\n{prom.read_log()[-2000:]}")
        view.say(f"sandbox: {name} ready and scraped after {time.monotonic() - wall0:.1f} s; starting the load")

        # 6. The load, the live view and (optionally) a crash.
        t0 = time.perf_counter()
        load_task = asyncio.create_task(loadgen.run_load(
            lambda: agent.endpoints(ns, name), model, shape.arrivals,
            on_result=lambda rec: recorder.on_result(rec, load_t()),
            timeout_s=scenario.request_timeout_s))

        def read_cluster() -> tuple[Optional[int], Optional[float], list[tuple[str, str]]]:
            dep = apps.read_namespaced_deployment(name, ns, _preload_content=False)
            desired = (json.loads(dep.data).get("spec") or {}).get("replicas")
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            p95 = (obj.get("status") or {}).get("p95Milliseconds")
            evs = core.list_namespaced_event(ns, _preload_content=False)
            items = json.loads(evs.data).get("items") or []
            scaled = [(e["metadata"].get("uid") or e["metadata"]["name"], e.get("message") or "")
                      for e in items if e.get("reason") == "Scaled"
                      and (e.get("involvedObject") or {}).get("name") == name]
            return desired, p95, scaled

        async def record() -> None:
            desired, p95 = config["floor"], None
            tick = 1
            while True:
                await asyncio.sleep(max(0.0, t0 + tick - time.perf_counter()))
                try:
                    got_desired, p95, scaled = await asyncio.to_thread(read_cluster)
                    desired = got_desired if got_desired is not None else desired
                    for uid, message in scaled:
                        ev = recorder.add_scale_event(uid, load_t(), message)
                        if ev is not None:
                            view.note(ev.text)
                except Exception as exc:  # the view must survive an API hiccup
                    view.note(f"(reading the cluster failed: {exc.__class__.__name__})")
                view.show(recorder.take_sample(load_t(), agent.ready_count(ns, name), desired, p95))
                tick += 1

        async def chaos() -> None:
            assert scenario.kill_at_s is not None
            await asyncio.sleep(max(0.0, t0 + scenario.kill_at_s - time.perf_counter()))
            try:
                pod = agent.kill(ns, name)
            except LookupError as exc:
                view.note(f"kill skipped: {exc}")
                return
            recorder.add_mark(load_t(), "killed", f"killed {pod}'s tritonserver (SIGKILL)")
            view.note(f"killed {pod} (SIGKILL)")

        side = [asyncio.create_task(record())]
        if scenario.kill_at_s is not None:
            side.append(asyncio.create_task(chaos()))
        try:
            await _until(stop, asyncio.shield(load_task))
        finally:
            for task in side:
                task.cancel()
            if not load_task.done():
                load_task.cancel()
            await asyncio.gather(load_task, *side, return_exceptions=True)
        if t0 is not None and (not recorder.samples or recorder.samples[-1].t < load_t() - 0.5):
            try:
                desired, p95, _ = await asyncio.to_thread(read_cluster)
            except Exception:
                desired, p95 = (recorder.samples[-1].desired if recorder.samples else None), None
            view.show(recorder.take_sample(load_t(), agent.ready_count(ns, name), desired or 0, p95))
    except _Stopped:
        interrupted = True
    except BaseException:  # SandboxError, a bug, or cancellation: tear down, keep the logs, re-raise
        failed = True
        raise
    finally:
        if stop.is_set():
            interrupted = True
        if teardown:
            view.say("sandbox: stopping: " + ", ".join(n for n, _ in reversed(teardown)))
        for what, fn in reversed(teardown):
            try:
                await asyncio.wait_for(fn(), 30)
            except Exception as exc:
                view.say(f"sandbox: stopping the {what} failed: {exc}")
        if agent is not None:
            pids.extend(agent.started_pids)
        leftovers = [p for p in pids if _group_alive(p)]
        if leftovers:
            view.say(f"sandbox: processes still running after teardown: {leftovers}")
        if temp_workdir and not failed and not leftovers and not interrupted:
            shutil.rmtree(workdir, ignore_errors=True)

    restarts = agent.restarts if agent else 0
    cold = list(agent.cold_starts_s) if agent else []
    summary = build_summary(
        records=recorder.records, samples=recorder.samples, scale_events=recorder.scale_events,
        marks=recorder.marks, phases=shape.phases, restarts=restarts, cold_starts_s=cold, config=config,
        scenario={"load": scenario.load, "description": shape.description, "duration_s": scenario.duration_s,
                  "rate_scale": scenario.rate_scale, "seed": scenario.seed, "kill_at_s": scenario.kill_at_s,
                  "title": f"tritonscale sandbox: {shape.description}, {name} "
                           f"(a={config['cost_base_ms']:g} ms, b={config['cost_per_item_ms']:g} ms, "
                           f"batch<={config['max_batch_size']}), target p95 {config['target_p95_ms']:g} ms"},
        interrupted=interrupted, wall_s=time.monotonic() - wall0,
    )
    summary["leftover_processes"] = leftovers
    return SandboxResult(summary, recorder, shape, config, interrupted, workdir, pids, leftovers)


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Run the operator's closed loop locally with real parts: an emulated Kubernetes API (KMock), "
                     "real tritonserver replicas, a real Prometheus, the operator, and a load generator.")
    p.add_argument("--duration", type=float, default=150.0, metavar="SECONDS",
                   help="seconds of load (default 150); startup adds ~15 s")
    p.add_argument("--load", default="step", metavar="SHAPE",
                   help="step (15 -> 70 -> 10 rps), burst (15 rps with 12 s at 80 rps every 50 s), or "
                        "trace[:FILE] (arrival timestamps; default the Azure LLM trace "
                        "../shared/data/azure-llm-conv-2023.csv) (default step)")
    p.add_argument("--rate-scale", type=float, metavar="X",
                   help=f"multiply the offered rate (default 1; trace: {TRACE_RATE_SCALE:g}, about 50 rps)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the Poisson arrivals (default 0)")
    p.add_argument("--summary", metavar="FILE.json", help="write the JSON summary here")
    p.add_argument("--plot", metavar="FILE.png", help="draw offered load, p95 vs target and replicas here")
    p.add_argument("--kill-at", type=float, metavar="SECONDS",
                   help="SIGKILL one ready tritonserver this many seconds into the load (the agent restarts it)")
    p.add_argument("--service", type=Path, metavar="FILE",
                   help="InferenceService to run instead of the sized python-cpu sample (python backend, gpus 0)")
    p.add_argument("--workdir", type=Path, metavar="DIR",
                   help="keep logs, model repositories and Prometheus data here (default: a temporary "
                        "directory, removed after a clean run)")
    p.add_argument("--quiet", "-q", action="store_true", help="no live view")


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.duration <= 0:
        raise ValueError("--duration must be > 0")
    if args.rate_scale is not None and args.rate_scale <= 0:
        raise ValueError("--rate-scale must be > 0")
    if args.load.partition(":")[0] not in ("step", "burst", "trace"):
        raise ValueError(f"--load must be step, burst or trace[:FILE], not {args.load!r}")
    return Scenario(duration_s=args.duration, load=args.load, rate_scale=args.rate_scale, seed=args.seed,
                    service_file=args.service, kill_at_s=args.kill_at, workdir=args.workdir)


def _report(summary: dict[str, Any], out: Any) -> None:
    phases = ", ".join(f"{k} {v:.0f} ms" if v is not None else f"{k} -"
                       for k, v in (summary.get("p95_ms_by_phase") or {}).items())
    print(f"sandbox: {summary['outcome']}: {summary['requests']} requests, {summary['errors']} errors; "
          f"replicas peak {summary['peak_replicas']}, final {summary['final_replicas']}; "
          f"{len(summary['scale_events'])} scale events; {summary['restarts']} restarts; p95 by phase: {phases}",
          file=out, flush=True)


def run(args: argparse.Namespace) -> int:
    try:
        scenario = _scenario(args)
    except ValueError as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    missing = preflight(scenario.load, need_plot=bool(args.plot), service_file=scenario.service_file)
    if missing:
        print(format_missing(missing), file=sys.stderr)
        return 1
    try:
        load_service(scenario)
        build_load(scenario)
    except (SandboxError, ValueError, OSError) as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    return asyncio.run(_main(scenario, args))


async def _main(scenario: Scenario, args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)

    def on_signal(signame: str) -> None:
        if stop.is_set():
            print(f"sandbox: {signame} again; still stopping (bounded: at most ~30 s)", file=sys.stderr, flush=True)
        else:
            print(f"sandbox: {signame}: stopping everything and writing what ran", file=sys.stderr, flush=True)
        stop.set()

    for sig in signals:
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        target = describe_config(load_service(scenario))["target_p95_ms"]
        result = await run_sandbox(scenario, stop=stop, view=LiveView(target, quiet=args.quiet))
    except SandboxError as exc:
        print(f"tritonscale sandbox: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    summary = result.summary
    _report(summary, sys.stdout)
    if args.summary:
        print(f"sandbox: summary written to {write_summary(summary, args.summary)}", flush=True)
    if args.plot:
        print(f"sandbox: plot written to {write_plot(summary, args.plot)}", flush=True)
    if result.leftover_pids:
        return 1
    return 130 if result.interrupted else 0


def main_sandbox(argv: Optional[list[str]] = None) -> int:
    """Standalone entry point: ``python -m tritonscale.sandbox.command ...``."""
    parser = argparse.ArgumentParser(prog="tritonscale sandbox")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main_sandbox())
