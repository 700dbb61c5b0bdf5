"""``tritonscale sandbox`` end to end: real tritonservers, real Prometheus, the real
operator process, the emulated Kubernetes API, and an open-loop load.

The scenario (130 s of load, ~145 s wall on 2 cores):

    base  12 s at 15 rps   one replica (capacity 50 rps) holds it
    high  43 s at 70 rps   above one replica: replicas rise, p95 comes back under 200 ms
    low   75 s at 10 rps   replicas return to minReplicas = 1, never below
    t=35 s: SIGKILL one tritonserver; the node agent restarts it and serving goes on.

Why the low phase is the longest: the operator reads p95 from Triton's 60 s
summary, and after a breach its capacity estimate can stay low enough that only
"LatencySlack" steps bring replicas down, one per 20 s scale-down window: 4 -> 1
takes up to ~60 s. The kill at 35 s hits the oldest pod, the one holding the
breach in its summary, which shortens the wait in practice.
"""

from __future__ import annotations

import argparse
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
from tritonscale.sandbox import prometheus_server as prometheus_runtime
from tritonscale.sandbox import tritonserver as triton_runtime
from tritonscale.sandbox.live_view import LiveView
from tritonscale.sandbox.summary import write_plot, write_summary

BASE, HIGH, LOW = ("base", 12.0, 15.0), ("high", 43.0, 70.0), ("low", 75.0, 10.0)
HIGH_START, HIGH_END = BASE[1], BASE[1] + HIGH[1]
END = HIGH_END + LOW[1]
KILL_AT = 35.0
TARGET_MS = 200.0


# No e2e/conftest.py on purpose: tests/integration does `from conftest import ...`, and
# a second rootless conftest.py would shadow tests/conftest.py in sys.modules.


@pytest.fixture
def sandbox_ready() -> None:
    """Skip (naming the fix) unless everything ``tritonscale sandbox`` needs is installed.
    ``.ci/setup`` installs all of it, so CI always runs these."""
    missing = command.preflight("step", need_plot=True)
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
    --model-repository, Prometheus' --config.file and the operator's KUBECONFIG."""
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


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


# --------------------------------------------------------------------------- preflight (fast)


def test_preflight_names_a_missing_tritonserver_and_the_command_that_installs_it(monkeypatch, capsys):
    def absent(*_a, **_k):
        raise RuntimeError("nvidia-pytriton is not installed (tritonserver binary not found); install with: ...")

    monkeypatch.setattr(triton_runtime, "find_tritonserver", absent)
    assert command.run(_args("--duration", "5")) == 1
    err = capsys.readouterr().err
    assert "tritonserver binary" in err and "nvidia-pytriton" in err
    assert f"{sys.executable} -m pip install 'nvidia-pytriton==0.7.0'" in err
    assert "Traceback" not in err


def test_preflight_names_a_missing_prometheus_and_a_missing_trace(monkeypatch, capsys, tmp_path):
    def absent():
        raise RuntimeError("prometheus binary not found on PATH or in /usr/bin")

    monkeypatch.setattr(prometheus_runtime, "find_prometheus", absent)
    assert command.run(_args("--load", f"trace:{tmp_path / 'nope.csv'}")) == 1
    err = capsys.readouterr().err
    assert "prometheus binary" in err and "apt-get install -y prometheus" in err
    assert f"trace file {tmp_path / 'nope.csv'}" in err
    assert "tritonserver" not in err  # only what is really missing
    assert ".ci/setup" in err


def test_bad_options_are_one_line_errors(capsys):
    assert command.run(_args("--load", "sine")) == 1
    assert capsys.readouterr().err.strip() == "tritonscale sandbox: --load must be step, burst or trace[:FILE], not 'sine'"


def test_load_shapes_name_their_phases():
    step = command.build_load(command.Scenario(duration_s=100))
    assert [p.name for p in step.phases] == ["base", "high", "low"]
    assert step.phases[-1].end_s == pytest.approx(100)
    burst = command.build_load(command.Scenario(duration_s=100, load="burst"))
    assert {p.name for p in burst.phases} == {"base", "burst"}
    assert burst.arrivals.size and burst.arrivals.max() < 100


# --------------------------------------------------------------------------- the closed loop


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_step_load_scales_up_and_back_down_and_survives_a_killed_replica(sandbox_ready, tmp_path):
    workdir = tmp_path / "sandbox"
    scenario = command.Scenario(duration_s=END, load="step", step_phases=[BASE, HIGH, LOW], kill_at_s=KILL_AT,
                                seed=1, workdir=workdir)
    started = time.monotonic()
    result = asyncio.run(command.run_sandbox(scenario, view=LiveView(TARGET_MS, stream=sys.stdout)))
    wall = time.monotonic() - started
    summary = result.summary
    write_summary(summary, tmp_path / "summary.json")
    write_plot(summary, tmp_path / "sandbox.png")
    print(f"wall {wall:.1f} s; summary {tmp_path / 'summary.json'}; plot {tmp_path / 'sandbox.png'}")
    assert wall < 180, f"the scenario must fit CI's 3 minutes, took {wall:.0f} s"
    assert not result.interrupted and summary["outcome"] == "completed"

    samples = result.samples
    desired = [(s.t, s.desired) for s in samples]
    scale_events = [e.to_dict() for e in result.scale_events]
    context = f"scale events {scale_events}; desired {desired}"

    # The summary holds what the issue lists.
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
    assert any(e.to_replicas > e.from_replicas and e.t < HIGH_END for e in result.scale_events), context

    # 2. ... and p95 comes back under target before the high phase ends (last 15 s of it).
    tail = [r.latency_ms for r in result.recorder.records if HIGH_END - 15 <= r.send_time < HIGH_END and r.ok]
    assert len(tail) > 0.8 * 15 * HIGH[2]
    tail_p95 = float(np.percentile(tail, 95))
    print(f"p95 over the last 15 s of the high phase: {tail_p95:.0f} ms")
    assert tail_p95 < TARGET_MS, context

    # 3. Load drops: back to minReplicas, never below it at any time.
    floor = summary["config"]["min_replicas"]
    assert min(d for _, d in desired) >= floor, context
    assert min(e.to_replicas for e in result.scale_events) >= floor
    assert samples[-1].desired == floor and samples[-1].ready == floor, context
    assert summary["final_replicas"] == floor
    assert any(e.to_replicas < e.from_replicas and e.t >= HIGH_END for e in result.scale_events), context
    back_at_floor = next(s.t for s in samples if s.t >= HIGH_END and s.desired == floor)
    print(f"back at minReplicas {back_at_floor - HIGH_END:.0f} s after the load dropped")

    # 4. The killed tritonserver came back, and serving went on.
    marks = {m.kind: m for m in reversed(result.recorder.marks)}  # first of each kind
    assert "killed" in marks and abs(marks["killed"].t - KILL_AT) < 2
    assert summary["restarts"] >= 1
    readies_after = [m for m in result.recorder.marks if m.kind == "ready" and m.t > marks["killed"].t]
    assert readies_after, result.recorder.marks
    print(f"killed pod ready again {readies_after[0].t - marks['killed'].t:.1f} s after the kill")
    assert summary["errors"] <= 0.02 * summary["requests"], summary["error_kinds"]
    after = [r for r in result.recorder.records if r.send_time >= marks["killed"].t + 10]
    assert after and all(r.ok for r in after), [r for r in after if not r.ok][:5]

    # 5. Nothing left running.
    assert result.leftover_pids == []
    assert result.pids and not [p for p in result.pids if _group_alive(p)]
    assert not processes_mentioning(str(workdir))


@pytest.mark.e2e
@pytest.mark.timeout(180)
def test_ctrl_c_stops_everything_and_still_writes_the_summary_and_plot(sandbox_ready, tmp_path):
    workdir, out = tmp_path / "sandbox", tmp_path / "out"
    cmd = [sys.executable, "-m", "tritonscale.sandbox.command", "--duration", "120", "--workdir", str(workdir),
           "--summary", str(out / "summary.json"), "--plot", str(out / "sandbox.png")]
    # Its own session, like a terminal's foreground job: Ctrl-C goes to the whole group.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 90
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("t=   3s") or time.monotonic() > deadline:
                break
        assert any(line.startswith("t=   3s") for line in lines), "".join(lines)
        assert processes_mentioning(str(workdir))  # tritonserver, prometheus, operator are up
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
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
