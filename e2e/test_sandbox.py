"""``tritonscale sandbox`` end to end on the real control plane: kube-apiserver,
kube-controller-manager and kube-scheduler (built from Kubernetes' Go modules), the
sandbox kubelet running real tritonservers, a real Prometheus, the real operator
process, and an open-loop load routed by the Service's EndpointSlices.

The scenario (130 s of load, ~175 s wall on 2 cores):

    base  12 s at 15 rps   one replica (capacity 50 rps) holds it
    high  43 s at 60 rps   above one replica: replicas rise, p95 comes back under 200 ms
    low   75 s at 10 rps   replicas return to minReplicas = 1, never below
    t=35 s: SIGKILL one tritonserver; its kubelet restarts it (restartCount 1 in the
    pod's status) and requests keep succeeding.
    t=40 s: `kubectl get tis,deploy,rs,pods,endpointslices` with the sandbox's kubeconfig.

Why the low phase is the longest: the operator reads p95 from Triton's 60 s
summary, and scale-down goes one replica per 20 s window.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tritonscale.sandbox import command
from tritonscale.sandbox.live_view import LiveView
from tritonscale.sandbox.orchestrator import group_alive, run_sandbox
from tritonscale.sandbox.preflight import Missing
from tritonscale.sandbox.scenario import Scenario
from tritonscale.sandbox.summary import write_plot, write_summary

# The high phase needs two replicas on any machine that runs the test: one replica serves the
# model's 50 rps (4 requests per 20 + 15 x 4 ms), or the 37-40 rps the decider measures when
# this 2-core machine is loaded (CI runs: 37.3-39.5 rps). At 70 rps, two such replicas would run
# at 89-95% of saturation, above the decider's planning share (UTILISATION), so three were what
# the rate needed there, and a high reading while a replica joined took CI's run to maxReplicas.
BASE, HIGH, LOW = ("base", 12.0, 15.0), ("high", 43.0, 60.0), ("low", 75.0, 10.0)
HIGH_START, HIGH_END = BASE[1], BASE[1] + HIGH[1]
END = HIGH_END + LOW[1]
# The kill comes early in the low phase, while the high phase's replicas are still up: in the high
# phase the fleet is right-sized (2-3 replicas for 60 rps), so losing one there measures the
# restart, not the autoscaler, and the high-phase latency check below would measure the kill.
KILL_AT = HIGH_END + 5.0
KUBECTL_AT = 40.0
TARGET_MS = 200.0
KUBECTL = Path(sys.executable).parent / "kubectl"  # from .ci/install-k8s-tools


@pytest.fixture
def sandbox_ready() -> None:
    """Skip (naming the fix) unless everything ``tritonscale sandbox`` needs is installed.
    ``.ci/setup`` installs all of it, so CI always runs these."""
    missing = command.preflight("step", need_plot=True)
    if not KUBECTL.exists():
        missing.append(Missing(f"kubectl at {KUBECTL}", ".ci/setup"))
    if missing:
        pytest.skip(command.format_missing(missing))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone, or not ours
        return b""


def processes_mentioning(text: str) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of every live process whose command line or environment
    contains ``text``: a sandbox's work directory is in every tritonserver's
    --model-repository, every control-plane component's flags, Prometheus'
    --config.file and the operator's KUBECONFIG."""
    needle, me, found = text.encode(), os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        if b") Z " in _read(entry / "stat"):  # a zombie is dead already
            continue
        cmdline = _read(entry / "cmdline")
        if needle in cmdline or needle in _read(entry / "environ"):
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")))
    return found


async def _kubectl_during_the_run(workdir: Path, at_s: float) -> dict:
    """Once the load has run ``at_s`` seconds, what the real kubectl sees in the sandbox's cluster."""
    kubeconfig = workdir / "control-plane" / "kubeconfig"
    started = None
    while started is None or time.monotonic() - started < at_s:
        if started is None and (workdir / "pods").exists() and kubeconfig.exists():
            started = time.monotonic()  # the first pod started; the load starts ~10 s later
        await asyncio.sleep(0.5)
    proc = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", "tis,deploy,rs,pods,endpointslices", "-o", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    table = await asyncio.create_subprocess_exec(
        str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", "tis,deploy,rs,pods,endpointslices", "-o", "wide",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    print((await table.communicate())[0].decode())
    return json.loads(out)


@pytest.mark.e2e
@pytest.mark.timeout(360)
def test_step_load_scales_up_and_back_down_and_survives_a_killed_replica(sandbox_ready, tmp_path):
    workdir = tmp_path / "sandbox"
    scenario = Scenario(duration_s=END, load="step", step_phases=[BASE, HIGH, LOW], kill_at_s=KILL_AT, seed=1,
                        workdir=workdir)

    async def both():
        seen = asyncio.create_task(_kubectl_during_the_run(workdir, KUBECTL_AT))
        result = await run_sandbox(scenario, view=LiveView(TARGET_MS, stream=sys.stdout))
        return result, await seen

    started = time.monotonic()
    result, objects = asyncio.run(both())
    wall = time.monotonic() - started
    summary = result.summary
    write_summary(summary, tmp_path / "summary.json")
    write_plot(summary, tmp_path / "sandbox.png")
    # The wall time is a figure, not a verdict (the timeout mark above guards a hang).
    print(f"wall {wall:.1f} s; summary {tmp_path / 'summary.json'}; plot {tmp_path / 'sandbox.png'}")
    assert not result.interrupted and summary["outcome"] == "completed"

    # 0. While it ran, kubectl saw the real objects: the InferenceService, the Deployment
    # and ReplicaSet the real controllers made, Running pods with pod IPs on the sandbox
    # Node, and EndpointSlices listing those IPs on the container port.
    kinds: dict[str, list[dict]] = {}
    for item in objects["items"]:
        kinds.setdefault(item["kind"], []).append(item)
    assert [o["metadata"]["name"] for o in kinds["InferenceService"]] == ["linear"]
    assert [o["metadata"]["name"] for o in kinds["Deployment"]] == ["linear"]
    rs = kinds["ReplicaSet"][0]
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    running = [p for p in kinds["Pod"] if p["status"].get("phase") == "Running"]
    assert running and all(p["spec"]["nodeName"] == "sandbox-node-0" for p in running)
    assert all(p["metadata"]["ownerReferences"][0]["name"] == rs["metadata"]["name"] for p in kinds["Pod"])
    ready_ips = {p["status"]["podIP"] for p in running
                 if {c["type"]: c["status"] for c in p["status"]["conditions"]}.get("Ready") == "True"}
    assert ready_ips and all(ip.startswith("10.244.0.") for ip in ready_ips)
    sliced = {a for s in kinds["EndpointSlice"] for e in s.get("endpoints") or []
              if (e.get("conditions") or {}).get("ready") for a in e["addresses"]}
    assert sliced == ready_ips
    assert {p["port"] for s in kinds["EndpointSlice"] for p in s["ports"]} == {8000, 8001, 8002}

    samples = result.samples
    fleet = [(round(s.t), round(s.offered_rps), s.ready, s.desired) for s in samples]
    context = f"scale events {[e.to_dict() for e in result.scale_events]}; (t, offered rps, ready, desired) {fleet}"
    for key in ("peak_replicas", "final_replicas", "scale_events", "requests", "errors", "p95_ms_by_phase",
                "restarts", "config"):
        assert key in summary, key
    assert set(summary["p95_ms_by_phase"]) == {"base", "high", "low"}
    assert json.loads((tmp_path / "summary.json").read_text())["requests"] == summary["requests"] > 0
    assert (tmp_path / "sandbox.png").stat().st_size > 10_000

    # 1. Load above one replica's capacity: replicas rise during the high phase.
    capacity = summary["config"]["replica_capacity_rps"]
    assert HIGH[2] > capacity
    high_desired = [s.desired for s in samples if HIGH_START <= s.t < HIGH_END]
    assert max(high_desired) >= math.ceil(HIGH[2] / capacity), context
    # ... to what the rate needs, not to maxReplicas: 60 rps on 37-50 rps replicas is 2, plus at most
    # one for a breach (the old p95/target rule jumped to 4).
    assert summary["peak_replicas"] <= 3, context
    assert any(e.to_replicas > e.from_replicas and e.t < HIGH_END for e in result.scale_events), context

    # 2. ... and p95 comes back under target before the high phase ends (last 15 s of it).
    tail = [r.latency_ms for r in result.recorder.records if HIGH_END - 15 <= r.send_time < HIGH_END and r.ok]
    assert len(tail) > 0.8 * 15 * HIGH[2]
    tail_p95 = float(np.percentile(tail, 95))
    print(f"p95 over the last 15 s of the high phase: {tail_p95:.0f} ms")
    assert tail_p95 < TARGET_MS, context

    # 3. Load drops: back to minReplicas (ready, as the Deployment controller counts), never below.
    floor = summary["config"]["min_replicas"]
    assert min(s.desired for s in samples) >= floor, context
    assert min(e.to_replicas for e in result.scale_events) >= floor
    assert samples[-1].desired == floor and samples[-1].ready == floor, context
    assert any(e.to_replicas < e.from_replicas and e.t >= HIGH_END for e in result.scale_events), context
    back_at_floor = next(s.t for s in samples if s.t >= HIGH_END and s.desired == floor)
    print(f"back at minReplicas {back_at_floor - HIGH_END:.0f} s after the load dropped")

    # 4. The killed tritonserver was restarted by its kubelet, the API shows restartCount 1,
    # and serving went on.
    marks = {m.kind: m for m in reversed(result.recorder.marks)}  # first of each kind
    assert "killed" in marks and abs(marks["killed"].t - KILL_AT) < 2
    killed_pod = marks["killed"].text.split()[1].rsplit("'s", 1)[0]
    counted = [m for m in result.recorder.marks if m.kind == "restartCount" and m.text.startswith(killed_pod)]
    assert counted and counted[0].text == f"{killed_pod} restartCount 1 in its status", result.recorder.marks
    assert summary["restarts"] >= 1
    after_kill = [m for m in result.recorder.marks if m.t > marks["killed"].t and m.text.startswith(killed_pod)]
    readies_after = [m for m in after_kill if m.kind == "ready"]
    # ... unless the low phase's scale-down took it first: the ReplicaSet controller deletes a
    # pod that is not ready before the ready ones, as it should.
    removed = [m for m in after_kill if m.kind == "stopping"]
    assert readies_after or removed, result.recorder.marks
    fate = (f"Ready again {readies_after[0].t - marks['killed'].t:.1f} s after the kill" if readies_after
            else f"removed by a scale-down {removed[0].t - marks['killed'].t:.1f} s after the kill")
    print(f"killed pod {fate}; errors {summary['errors']} of {summary['requests']}: {summary['error_kinds']}")
    # Rejections by Triton's queue policy (the operator's default timeout, twice the target) are
    # deliberate misses while the load outruns the replicas: only at the step up, before the
    # added replicas are warm, on the killed pod's queue, or around a scale-down (the remaining
    # replicas take the removed one's share at once, and the stopping pod's queue drains).
    downs = [e.t for e in result.scale_events if e.to_replicas < e.from_replicas]
    rejected = [r for r in result.recorder.records if r.error.startswith("rejected")]
    stray = [r.send_time for r in rejected
             if not (HIGH_START <= r.send_time < HIGH_START + 25
                     or marks["killed"].t - 5 <= r.send_time < marks["killed"].t + 15
                     or any(t - 5 <= r.send_time < t + 10 for t in downs))]
    # Elsewhere they stay rare: a stall of this 2-core machine (the control plane, Prometheus and
    # the load generator share it with the tritonservers) can hold a queue past the timeout at
    # any moment (a CI run: 2 rejections at 10 rps on one idle-ish replica), but a decider or
    # routing fault rejects by the dozen. At most 0.2% of the requests (~7 of ~3,500).
    assert len(stray) <= 0.002 * len(result.recorder.records), (stray[:10], [e.to_dict() for e in result.scale_events])
    assert summary["errors"] - len(rejected) <= 0.02 * summary["requests"], summary["error_kinds"]
    # Once the killed pod is back, nothing fails but those stray rejections (bounded above): the
    # same stall rejected the run's last request, at 10 rps on one replica, in a CI run.
    after = [r for r in result.recorder.records if r.send_time >= marks["killed"].t + 10]
    assert after and all(r.ok or r.error.startswith("rejected") for r in after), [r for r in after if not r.ok][:5]

    # 5. Nothing left running: control plane, Prometheus, operator, every tritonserver.
    assert result.leftover_pids == []
    assert result.pids and not [p for p in result.pids if group_alive(p)]
    assert not processes_mentioning(str(workdir))


@pytest.mark.e2e
@pytest.mark.timeout(240)
def test_ctrl_c_stops_everything_and_still_writes_the_summary_and_plot(sandbox_ready, tmp_path):
    workdir, out = tmp_path / "sandbox", tmp_path / "out"
    cmd = [sys.executable, "-m", "tritonscale.sandbox.command", "--duration", "120", "--workdir", str(workdir),
           "--summary", str(out / "summary.json"), "--plot", str(out / "sandbox.png")]
    # Its own session, like a terminal's foreground job: Ctrl-C goes to the whole group.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 150
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("t=   3s") or time.monotonic() > deadline:
                break
        assert any(line.startswith("t=   3s") for line in lines), "".join(lines)
        alive = processes_mentioning(str(workdir))
        for name in ("kube-apiserver", "etcd", "tritonserver", "prometheus", "tritonscale run"):
            assert any(name in cmdline for _, cmdline in alive), (name, alive)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = "".join(lines) + rest
    print(output[-3000:])
    assert proc.returncode == 130, output[-3000:]
    assert "Traceback" not in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["outcome"] == "interrupted" and summary["requests"] > 0
    assert summary["leftover_processes"] == []
    assert (out / "sandbox.png").stat().st_size > 10_000
    assert not processes_mentioning(str(workdir))
