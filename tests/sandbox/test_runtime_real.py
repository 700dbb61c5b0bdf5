"""Real-binary tests: tritonserver (from nvidia-pytriton) + Debian's prometheus, plus
unit tests of the load-shape functions.

The real-binary tests skip only when the binary is not installed.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import subprocess
from pathlib import Path

import httpx
import numpy as np
import pytest

from support import rendered
from support.spec_cases import base_spec, mutate
from tritonscale.sandbox.grpc_clients import run_grpc_clients
from tritonscale.sandbox.loadgen import (
    LoadResult,
    RequestRecord,
    burst_schedule,
    run_load,
    step_schedule,
    trace_schedule,
)
from tritonscale.sandbox.prometheus_server import PrometheusServer, find_prometheus
from tritonscale.sandbox.tritonserver import (
    TritonProcess,
    cost_model_config,
    find_tritonserver,
    install_model,
    metric_value,
    read_metrics,
)

MODEL = "cost"
AZURE_TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "azure-llm-conv-2023.csv"


def _triton_or_skip():
    try:
        return find_tritonserver()
    except RuntimeError as e:
        pytest.skip(f"tritonserver binary absent: {e}")


def _prometheus_or_skip():
    try:
        return find_prometheus()
    except RuntimeError as e:
        pytest.skip(f"prometheus binary absent: {e}")


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    _triton_or_skip()
    root = tmp_path_factory.mktemp("triton")
    install_model(
        root / "repo",
        MODEL,
        cost_model_config(MODEL, max_batch_size=16, dynamic_batching=True, max_queue_delay_us=2000),
    )
    proc = TritonProcess.with_free_ports(root / "repo", log_path=root / "tritonserver.log")
    proc.start()
    try:
        ready = proc.wait_ready_blocking(MODEL, timeout=30)
        proc.ready_result = ready  # type: ignore[attr-defined]
        yield proc
    finally:
        proc.stop()
        assert not proc.is_alive()


# --------------------------------------------------------------------------- tritonserver


def test_ready_within_30s(triton):
    assert triton.ready_result, f"tritonserver not ready in 30 s; log tail:\n{triton.read_log()[-3000:]}"


def test_inference_doubles_input(triton):
    x = [1.5, -2.0, 3.25, 0.0]
    r = httpx.post(
        f"{triton.http_url}/v2/models/{MODEL}/infer",
        json={"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x}]},
        timeout=10,
    )
    assert r.status_code == 200, r.text
    out = {o["name"]: o for o in r.json()["outputs"]}
    assert out["y"]["shape"] == [1, 4]
    assert np.allclose(out["y"]["data"], np.asarray(x) * 2)


async def test_concurrent_requests_form_batches(triton):
    before = read_metrics(triton.metrics_port)
    count0 = metric_value(before, "nv_inference_count", model=MODEL) or 0.0
    exec0 = metric_value(before, "nv_inference_exec_count", model=MODEL) or 0.0

    # 40 requests, all sent at t=0 (open loop, nothing waits for anything).
    res = await run_load(triton.http_address, MODEL, np.zeros(40), timeout_s=20)
    assert res.errors == 0, res.error_counts()
    assert res.requests == 40

    after = read_metrics(triton.metrics_port)
    count = metric_value(after, "nv_inference_count", model=MODEL) - count0
    execs = metric_value(after, "nv_inference_exec_count", model=MODEL) - exec0
    assert count == 40
    assert execs < count, f"no batching: {execs} executions for {count} inferences"
    # 40 items in batches of at most 16 need >= 3 executions.
    assert execs >= 3


def test_summary_p95_exported(triton):
    # test order is not guaranteed for -k runs: make sure there is recent traffic
    httpx.post(
        f"{triton.http_url}/v2/models/{MODEL}/infer",
        json={"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]},
        timeout=10,
    ).raise_for_status()
    samples = read_metrics(triton.metrics_port)
    p95 = [v for n, lab, v in samples
           if n == "nv_inference_request_summary_us" and lab.get("quantile") == "0.95" and lab.get("model") == MODEL]
    assert p95, "nv_inference_request_summary_us{quantile=0.95} missing (need --metrics-config=summary_latencies=true)"
    assert p95[0] > 20_000  # the cost model sleeps >= 20 ms per batch
    assert not math.isnan(p95[0])


async def test_prometheus_scrapes_triton_via_file_sd(triton, tmp_path):
    _prometheus_or_skip()
    prom = PrometheusServer(tmp_path / "prom", scrape_interval_s=1.0)
    prom.start()
    try:
        assert await prom.wait_ready(timeout=20), prom.read_log()[-2000:]
        prom.write_targets(
            [(triton.metrics_address, {"namespace": "ns1", "inferenceservice": "x", "pod": "x-0"})]
        )
        assert await prom.wait_target_up(triton.metrics_address, timeout=30), prom.read_log()[-2000:]
        result = []
        for _ in range(50):
            result = await prom.query('nv_inference_request_success{inferenceservice="x"}')
            if result:
                break
            await asyncio.sleep(0.2)
        assert result, "no samples for nv_inference_request_success{inferenceservice='x'}"
        labels = result[0]["metric"]
        assert labels["namespace"] == "ns1"
        assert labels["pod"] == "x-0"
        assert labels["model"] == MODEL
        assert float(result[0]["value"][1]) >= 1
        # labels from file_sd must not leak into other services
        assert await prom.query('nv_inference_request_success{inferenceservice="other"}') == []
    finally:
        prom.stop()
    assert not prom.is_alive()


def test_prometheus_kill_and_restart_keeps_port(tmp_path):
    _prometheus_or_skip()
    prom = PrometheusServer(tmp_path / "prom")
    prom.start()
    try:
        assert asyncio.run(prom.wait_ready(20))
        port = prom.port
        prom.kill()
        assert not prom.is_alive()
        with pytest.raises(httpx.HTTPError):
            httpx.get(prom.url + "/-/ready", timeout=1)
        prom.start()
        assert asyncio.run(prom.wait_ready(20)), prom.read_log()[-2000:]
        assert prom.port == port
    finally:
        prom.stop()


def test_stop_leaves_no_processes(tmp_path):
    _triton_or_skip()
    install_model(tmp_path / "repo", MODEL, cost_model_config(MODEL))
    proc = TritonProcess.with_free_ports(tmp_path / "repo", log_path=tmp_path / "t.log")
    proc.start()
    try:
        assert proc.wait_ready_blocking(MODEL, timeout=30), proc.read_log()[-3000:]
        pgid = proc.pid
    finally:
        proc.kill()
    assert not proc.is_alive()
    # nothing left in the process group (the python backend stub included)
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True).stdout
    assert out.strip() == ""
    assert not list(Path("/dev/shm").glob(proc.shm_prefix + "*"))


async def test_run_load_round_robin_and_errors(triton):
    # one live backend and one dead port: half the requests fail, none hang
    dead = "127.0.0.1:1"
    seen: list[RequestRecord] = []
    res = await run_load(lambda: [triton.http_address, dead], MODEL, np.linspace(0, 0.5, 10), on_result=seen.append,
                         timeout_s=5)
    assert res.requests == 10 and len(seen) == 10
    assert {r.backend for r in res.records} == {triton.http_address, dead}
    assert res.ok == 5 and res.errors == 5
    assert all(r.backend == dead for r in res.records if not r.ok)
    # no backend at all
    res = await run_load(lambda: [], MODEL, [0.0, 0.01])
    assert res.error_counts() == {"no-backend": 2}


def _rendered_connection_age_flags(changes: dict) -> list[str]:
    """The --grpc-max-connection-age flags the operator renders for the sample's spec with ``changes``."""
    doc = {"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "linear", "namespace": "default"}, "spec": mutate(base_spec(), changes)}
    args = rendered.triton(rendered.children(doc)["Deployment"])["args"]
    return [a for a in args if a.startswith("--grpc-max-connection-age")]


@pytest.mark.parametrize(("changes", "reconnects"), [
    # the default (10 s): no connection reaches its age in the 3.5 s run
    ({}, False),
    # extraArgs after the operator's flag: tritonserver takes the last one, 1 s
    ({"runtime.extraArgs": ["--grpc-max-connection-age=1000"]}, True),
])
def test_grpc_clients_reconnect_at_the_rendered_connection_age(tmp_path, changes, reconnects):
    """tritonserver takes the flags the operator renders, closes each gRPC connection at the age they
    give, and the clients reconnect without a failed request."""
    _triton_or_skip()
    flags = _rendered_connection_age_flags(changes)
    assert flags[0] == "--grpc-max-connection-age=10000"
    install_model(tmp_path / "repo", MODEL, cost_model_config(MODEL, max_batch_size=16, dynamic_batching=True))
    proc = TritonProcess.with_free_ports(tmp_path / "repo", log_path=tmp_path / "t.log", extra_args=flags)
    proc.start()
    try:
        assert proc.wait_ready_blocking(MODEL, timeout=30), proc.read_log()[-3000:]
        res = run_grpc_clients(f"127.0.0.1:{proc.grpc_port}", MODEL, seconds=3.5, clients=2)
    finally:
        proc.stop()
    assert res.errors == [] and res.requests > 20
    # two clients over 3.5 s at a 1 s age (+-10%): each reconnects two or three times
    assert (4 <= res.reconnections <= 8) if reconnects else res.reconnections == 0, res


# --------------------------------------------------------------------------- schedules (unit)


def _within_poisson(n: int, expected: float, sigmas: float = 5.0) -> bool:
    return abs(n - expected) <= sigmas * math.sqrt(expected) + 1


def test_step_schedule_counts_and_order():
    arr = step_schedule([(10, 50), (5, 200), (10, 0)], seed=1)
    assert np.all(np.diff(arr) >= 0)
    assert arr[0] >= 0 and arr[-1] < 15  # the last phase has rate 0
    assert _within_poisson(int(np.sum(arr < 10)), 500)
    assert _within_poisson(int(np.sum((arr >= 10) & (arr < 15))), 1000)
    # deterministic for a given seed, different otherwise
    assert np.array_equal(arr, step_schedule([(10, 50), (5, 200), (10, 0)], seed=1))
    assert not np.array_equal(arr, step_schedule([(10, 50), (5, 200), (10, 0)], seed=2))


def test_step_schedule_interarrivals_are_exponential():
    arr = step_schedule([(200, 20)], seed=3)
    gaps = np.diff(arr)
    assert abs(gaps.mean() - 1 / 20) < 0.005
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.1  # CV of an exponential is 1


def test_burst_schedule():
    arr = burst_schedule(base_rps=10, burst_rps=100, period_s=20, burst_s=5, duration_s=60, seed=0)
    assert np.all(np.diff(arr) >= 0) and arr[-1] < 60
    phase = np.mod(arr, 20)
    in_burst = int(np.sum(phase >= 15))
    base = int(np.sum(phase < 15))
    assert _within_poisson(in_burst, 3 * 5 * 100)
    assert _within_poisson(base, 3 * 15 * 10)
    # a partial final period is cut at duration_s
    arr2 = burst_schedule(10, 100, period_s=20, burst_s=5, duration_s=30, seed=0)
    assert arr2[-1] < 30 and _within_poisson(len(arr2), 15 * 10 + 5 * 100 + 10 * 10)
    with pytest.raises(ValueError):
        burst_schedule(1, 2, period_s=5, burst_s=6, duration_s=10)


def test_trace_schedule_azure_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:47.0000000,10,10\n"  # out of order on purpose
        "2023-11-16 18:16:06.6805900,1,1\n"
    )
    arr = trace_schedule(p)
    assert arr.tolist() == pytest.approx([0.0, 0.31941, 4.314579, 20.0], abs=1e-6)
    assert trace_schedule(p, rate_scale=4).tolist() == pytest.approx([0.0, 0.0798525, 1.07864475, 5.0], abs=1e-6)
    assert len(trace_schedule(p, rate_scale=1, duration_s=10)) == 3


def test_trace_schedule_plain_text(tmp_path):
    p = tmp_path / "arrivals.txt"
    p.write_text("# seconds\n10.0\n10.5\n\n12\n11.0\n")
    assert trace_schedule(p).tolist() == [0.0, 0.5, 1.0, 2.0]
    assert trace_schedule(p, rate_scale=2).tolist() == [0.0, 0.25, 0.5, 1.0]
    q = tmp_path / "iso.txt"
    q.write_text("2024-01-01T00:00:00.25\n2024-01-01T00:00:01.75\n")
    assert trace_schedule(q).tolist() == pytest.approx([0.0, 1.5])
    bad = tmp_path / "bad.txt"
    bad.write_text("1.0\nyesterday\n")
    with pytest.raises(ValueError, match="line 2: neither seconds nor an ISO timestamp"):
        trace_schedule(bad)  # the simulator's parser and its one-line errors
    jl = tmp_path / "mooncake.jsonl"  # Mooncake's JSON Lines: timestamp in ms
    jl.write_text('{"timestamp": 0, "input_length": 655}\n{"timestamp": 10535, "input_length": 672}\n')
    assert trace_schedule(jl, rate_scale=2).tolist() == pytest.approx([0.0, 5.2675])


def test_trace_schedule_real_azure_file():
    assert AZURE_TRACE.exists(), f"{AZURE_TRACE}: the shared trace, beside the repository in CI"
    arr = trace_schedule(AZURE_TRACE)
    assert len(arr) == 19366
    assert 55 * 60 < arr[-1] < 60 * 60
    fast = trace_schedule(AZURE_TRACE, rate_scale=10, duration_s=60)
    # 10x compression: ~5.6 rps * 10 over 60 s, roughly (the trace is bursty)
    assert 1000 < len(fast) < 8000
    assert fast[-1] < 60


def test_load_result_summary():
    recs = [RequestRecord(i * 0.1, float(i + 1), True) for i in range(100)]
    recs.append(RequestRecord(10.0, float("nan"), False, error="overflow"))
    res = LoadResult(recs, 0.0, 10.0)
    assert res.requests == 101 and res.errors == 1 and res.ok == 100
    assert res.p50_ms == pytest.approx(50.5)
    assert res.p95_ms == pytest.approx(95.05)
    assert res.p99_ms == pytest.approx(99.01)
    assert res.throughput_rps() == pytest.approx(10.0)
    assert res.error_counts() == {"overflow": 1}
    assert res.window(0, 5).requests == 50


# --------------------------------------------------------------------------- install errors (unit)


def test_missing_tritonserver_has_install_hint(monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a, **k: None)
    with pytest.raises(RuntimeError, match=r"pip install nvidia-pytriton==0\.7\.0"):
        find_tritonserver(cache_dir=tmp_path)


def test_missing_prometheus_has_install_hint(monkeypatch):
    import os

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    with pytest.raises(RuntimeError, match=r"apt-get install -y prometheus"):
        find_prometheus()


def test_backend_dir_layout_and_env(tmp_path):
    inst = _triton_or_skip()
    py = inst.backend_dir / "python"
    for f in ("libtriton_python.so", "triton_python_backend_utils.py", "triton_python_backend_stub"):
        assert (py / f).is_file(), f
    env = inst.env({"PATH": "/usr/bin"})
    assert env["LD_LIBRARY_PATH"].split(":")[:2] == [str(inst.libs_dir), str(inst.python_libdir)]
    assert env["PATH"].split(":")[0] == str(inst.venv_bin)


def test_cost_model_config_variants():
    on = cost_model_config("m", preferred_batch_sizes=[4, 8, 16], cost_base_ms=5, cost_per_item_ms=0.5)
    assert "dynamic_batching {" in on and "preferred_batch_size: [ 4, 8, 16 ]" in on
    assert 'string_value: "5"' in on and 'string_value: "0.5"' in on
    off = cost_model_config("m", dynamic_batching=False)
    assert "dynamic_batching" not in off and "max_batch_size: 16" in off
