"""Step 7 of the sandbox's run (``orchestrator``): the load, and what is recorded while it runs -- the
kubelets' events, the once-a-second reads of the cluster into the recorder and the live line, and the
optional crash (--kill-at).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tritonscale.sandbox import loadgen
from tritonscale.sandbox.cluster_reader import ClusterReader
from tritonscale.sandbox.kubelet import Kubelet, KubeletEvent
from tritonscale.sandbox.live_view import LiveView, Recorder
from tritonscale.sandbox.operator_process import OperatorProcess
from tritonscale.sandbox.scenario import LoadShape, Scenario
from tritonscale.sandbox.service_routing import ServiceRouter
from tritonscale.sandbox.stoppable_waits import until


class LoadPhase:
    """The load phase of a sandbox run (``orchestrator._Run``, which sets these attributes and starts
    the parts the load needs)."""

    scenario: Scenario
    stop: asyncio.Event
    view: LiveView
    recorder: Recorder
    config: dict[str, Any]
    shape: LoadShape
    ns: str
    name: str
    model: str
    kubelets: list[Kubelet]
    t0: float | None  # perf_counter at the start of the load
    operator_exited_at: float | None  # load time at which the operator was first seen gone


    def load_t(self) -> float:
        return time.perf_counter() - self.t0 if self.t0 is not None else 0.0

    def on_kubelet_event(self, ev: KubeletEvent) -> None:
        if ev.service != self.name:
            return
        text = ev.message.split(" (")[0] if ev.kind in ("started", "restarted", "stopping") else ev.message
        if self.t0 is None:
            self.view.say(f"sandbox: {text}")
            return
        if ev.kind in ("crashed", "restarted", "ready", "backoff", "unhealthy", "stopping"):
            self.recorder.add_mark(self.load_t(), ev.kind, ev.message)
        self.view.note(text)

    async def record(self, reader: ClusterReader, operator: OperatorProcess) -> None:
        """Once a second: the operator still running, the replicas, p95, Scaled and BatchingTuned Events,
        pod restarts -- into the recorder and the live line."""
        assert self.t0 is not None
        recorder, view = self.recorder, self.view
        desired, ready, p95 = self.config["floor"], 0, None
        restarts: dict[str, int] = {}
        tuned: set[str] = set()
        tick = 1
        while True:
            await asyncio.sleep(max(0.0, self.t0 + tick - time.perf_counter()))
            if self.operator_exited_at is None and not operator.alive():  # the run measures nothing after
                self.operator_exited_at = self.load_t()
                code = operator.proc.returncode if operator.proc else None
                text = (f"the operator (pid {operator.pid}) exited during the load, exit code {code}: nothing "
                        f"autoscales the service after this (its log: {operator.log_path})")
                recorder.add_mark(self.operator_exited_at, "operatorExited", text)
                view.note(text)
            try:
                got, ready, p95, scaled = await asyncio.to_thread(reader.read)
                desired = got if got is not None else desired
                for uid, reason, message in scaled:
                    if reason == "BatchingTuned":  # the tuner's change, rolled out to the pods
                        if uid not in tuned:
                            tuned.add(uid)
                            view.note(recorder.add_mark(self.load_t(), "batchingTuned", message).text)
                        continue
                    ev = recorder.add_scale_event(uid, self.load_t(), message)
                    if ev is not None:
                        view.note(ev.text)
                for pod, count in (await asyncio.to_thread(reader.restart_counts)).items():
                    if count > restarts.get(pod, 0):
                        recorder.add_mark(self.load_t(), "restartCount", f"{pod} restartCount {count} in its status")
                    restarts[pod] = count
            except Exception as exc:  # the view must survive an API hiccup
                view.note(f"(reading the cluster failed: {exc.__class__.__name__})")
            view.show(recorder.take_sample(self.load_t(), ready, desired, p95))
            tick += 1

    async def chaos(self) -> None:
        """--kill-at: SIGKILL one ready pod's tritonserver."""
        assert self.scenario.kill_at_s is not None and self.t0 is not None
        await asyncio.sleep(max(0.0, self.t0 + self.scenario.kill_at_s - time.perf_counter()))
        for kubelet in self.kubelets:
            try:
                pod = kubelet.kill(self.ns, self.name)
            except LookupError:
                continue
            self.recorder.add_mark(self.load_t(), "killed", f"killed {pod}'s tritonserver (SIGKILL)")
            self.view.note(f"killed {pod} (SIGKILL)")
            return
        self.view.note("kill skipped: no ready pod")

    async def run_load(self, reader: ClusterReader, router: ServiceRouter, operator: OperatorProcess) -> None:
        """7. The load, the live view and (optionally) a crash; a last sample at the end."""
        self.t0 = time.perf_counter()
        load_task = asyncio.create_task(loadgen.run_load(
            router.backends, self.model, self.shape.arrivals,
            on_result=lambda rec: self.recorder.on_result(rec, self.load_t()),
            timeout_s=self.scenario.request_timeout_s))
        side = [asyncio.create_task(self.record(reader, operator))]
        if self.scenario.kill_at_s is not None:
            side.append(asyncio.create_task(self.chaos()))
        try:
            await until(self.stop, asyncio.shield(load_task))
        finally:
            for task in side:
                task.cancel()
            if not load_task.done():
                load_task.cancel()
            await asyncio.gather(load_task, *side, return_exceptions=True)
        samples = self.recorder.samples
        if not samples or samples[-1].t < self.load_t() - 0.5:
            try:
                desired, ready, p95, _ = await asyncio.to_thread(reader.read)
            except Exception:
                last = samples[-1] if samples else None
                desired, ready, p95 = (last.desired if last else None), (last.ready if last else 0), None
            self.view.show(self.recorder.take_sample(self.load_t(), ready, desired or 0, p95))
