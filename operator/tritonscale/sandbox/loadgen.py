"""Load shapes and an open-loop load generator for the sandbox tritonservers.

Schedules are plain sorted ``numpy`` arrays of arrival times in seconds from the start
of the run, so they are easy to test, plot and replay:

* :func:`step_schedule` -- Poisson arrivals, piecewise-constant rate;
* :func:`burst_schedule` -- a base rate with a periodic burst;
* :func:`trace_schedule` -- a recorded trace (Azure LLM CSV, one arrival per line or Mooncake JSON Lines),
  time-compressed by ``rate_scale``.

:func:`run_load` fires each request at its arrival time whether or not earlier ones have
completed (open loop), spreads them round-robin over the current backend list, and
records ``(send_time, latency_ms, ok)`` per request.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "step_schedule",
    "burst_schedule",
    "trace_schedule",
    "RequestRecord",
    "LoadResult",
    "run_load",
    "percentile",
]

# --------------------------------------------------------------------------- schedules


def _poisson_segment(rng: np.random.Generator, start: float, duration: float, rps: float) -> np.ndarray:
    if duration <= 0 or rps <= 0:
        return np.empty(0)
    n = rng.poisson(rps * duration)
    return start + rng.uniform(0.0, duration, size=n)  # Poisson process = Poisson count + uniform times


def step_schedule(phases: Sequence[tuple[float, float]], seed: int | None = 0) -> np.ndarray:
    """Poisson arrivals with a piecewise-constant rate.

    ``phases``: ``[(duration_s, rps), ...]`` played back to back.  Returns sorted times (s).
    """
    rng = np.random.default_rng(seed)
    t = 0.0
    parts = []
    for duration, rps in phases:
        parts.append(_poisson_segment(rng, t, float(duration), float(rps)))
        t += float(duration)
    return np.sort(np.concatenate(parts)) if parts else np.empty(0)


def burst_schedule(
    base_rps: float,
    burst_rps: float,
    period_s: float,
    burst_s: float,
    duration_s: float,
    seed: int | None = 0,
) -> np.ndarray:
    """Poisson arrivals at ``base_rps`` with a burst at ``burst_rps`` every ``period_s``.

    Each period is ``period_s - burst_s`` seconds of base load followed by ``burst_s``
    seconds of burst (so a run starts in steady state).  Cut at ``duration_s``.
    """
    if period_s <= 0 or not (0 <= burst_s <= period_s):
        raise ValueError("need period_s > 0 and 0 <= burst_s <= period_s")
    phases: list[tuple[float, float]] = []
    t = 0.0
    while t < duration_s:
        for length, rps in ((period_s - burst_s, base_rps), (burst_s, burst_rps)):
            length = min(length, duration_s - t)
            if length > 0:
                phases.append((length, rps))
                t += length
    return step_schedule(phases, seed)


def trace_schedule(path: Path | str, rate_scale: float = 1.0, duration_s: float | None = None) -> np.ndarray:
    """Arrival times from a recorded trace, relative to its first arrival.

    Read by the simulator's parser (``simulate.arrivals.load_trace``: a CSV with a
    ``TIMESTAMP`` column, one arrival per line, or Mooncake JSON Lines; gzip allowed), so both take the same
    files and reject bad ones with the same one-line errors (a ValueError naming the line).
    ``rate_scale`` > 1 compresses time (``rate_scale`` times the rps); ``duration_s``
    keeps only arrivals before that many seconds (after scaling).
    """
    from tritonscale.simulate.arrivals import load_trace

    if rate_scale <= 0:
        raise ValueError("rate_scale must be > 0")
    times = load_trace(str(path))  # sorted, never empty (no arrivals is a TraceError)
    out = (times - times[0]) / float(rate_scale)
    if duration_s is not None:
        out = out[out < duration_s]
    return out


# --------------------------------------------------------------------------- results


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """``q``-th percentile (0..100) of ``values``; NaN when empty."""
    arr = np.asarray(values, dtype=float)
    return float(np.percentile(arr, q)) if arr.size else float("nan")


@dataclass(frozen=True)
class RequestRecord:
    send_time: float  # seconds since run start, when the request was actually sent
    latency_ms: float  # NaN if the request never got a response
    ok: bool
    backend: str = ""  # "host:port" it went to ("" if none)
    # "", "overflow", "no-backend", "timeout", "rejected: ..." (Triton's queue policy), or the exception text
    error: str = ""
    lag_ms: float = 0.0  # how late the send was vs. the scheduled arrival


@dataclass
class LoadResult:
    records: list[RequestRecord] = field(default_factory=list)
    started_at: float = 0.0  # time.time() at t=0 of the schedule
    duration_s: float = 0.0  # wall time from t=0 until the last response (or give-up)

    @property
    def requests(self) -> int:
        return len(self.records)

    @property
    def ok(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def errors(self) -> int:
        return sum(1 for r in self.records if not r.ok)

    def error_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            if not r.ok:
                key = r.error.split(":")[0] or "error"
                out[key] = out.get(key, 0) + 1
        return out

    def latencies_ms(self) -> np.ndarray:
        """Latencies of successful requests (ms)."""
        return np.asarray([r.latency_ms for r in self.records if r.ok], dtype=float)

    def quantile_ms(self, q: float) -> float:
        return percentile(self.latencies_ms(), q)

    @property
    def p50_ms(self) -> float:
        return self.quantile_ms(50)

    @property
    def p95_ms(self) -> float:
        return self.quantile_ms(95)

    @property
    def p99_ms(self) -> float:
        return self.quantile_ms(99)

    @property
    def max_lag_ms(self) -> float:
        return max((r.lag_ms for r in self.records), default=0.0)

    def throughput_rps(self) -> float:
        """Successful responses per second over the run's wall time."""
        return self.ok / self.duration_s if self.duration_s > 0 else float("nan")

    def window(self, t0: float, t1: float) -> LoadResult:
        """Records whose send_time is in ``[t0, t1)``."""
        recs = [r for r in self.records if t0 <= r.send_time < t1]
        return LoadResult(recs, self.started_at + t0, t1 - t0)

    def summary(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "p50_ms": self.p50_ms,
            "p95_ms": self.p95_ms,
            "p99_ms": self.p99_ms,
            "throughput_rps": self.throughput_rps(),
            "max_lag_ms": self.max_lag_ms,
        }

    def __str__(self) -> str:
        s = self.summary()
        return (
            f"requests={s['requests']} ok={s['ok']} errors={s['errors']} "
            f"p50={s['p50_ms']:.1f}ms p95={s['p95_ms']:.1f}ms p99={s['p99_ms']:.1f}ms "
            f"throughput={s['throughput_rps']:.1f}rps"
        )


# --------------------------------------------------------------------------- generator

UrlSource = str | Sequence[str] | Callable[[], str | Sequence[str]]


def _strip_scheme(url: str) -> str:
    for prefix in ("http://", "https://"):
        if url.startswith(prefix):
            url = url[len(prefix):]
    return url.rstrip("/")


async def _close_quietly(client: Any) -> None:
    try:
        await client.close()
    except Exception:  # closing a connection to a server that is going away
        pass


def _backends(url: UrlSource) -> list[str]:
    value = url() if callable(url) else url
    if isinstance(value, str):
        value = [value]
    return [_strip_scheme(u) for u in value if u]


async def run_load(
    url: UrlSource,
    model: str,
    arrivals: Sequence[float] | np.ndarray,
    *,
    on_result: Callable[[RequestRecord], Any] | None = None,
    max_inflight: int = 512,
    timeout_s: float = 30.0,
    input_shape: tuple[int, ...] = (1, 4),
    conn_limit: int | None = None,
) -> LoadResult:
    """Open-loop load: send request i at ``arrivals[i]`` seconds after the start.

    ``url``: ``"127.0.0.1:8000"`` (scheme optional), a list of them, or a callable
    returning the *current* list (called at every arrival), so requests are spread
    round-robin across live replicas.  Once a backend has left that list and has no
    request in flight, its keep-alive connections are closed: on SIGTERM tritonserver
    waits for open HTTP connections (up to its 30 s exit timeout), so a replica being
    scaled down would otherwise linger.  Requests never wait for earlier ones; if
    ``max_inflight`` are already outstanding the new one is dropped and recorded as an
    ``overflow`` error.  A request that gets no response within ``timeout_s`` is a
    ``timeout`` error.  ``on_result`` (sync or async) is called with each
    :class:`RequestRecord` as it completes.  Latency is measured from the actual send.
    """
    import tritonclient.http as httpclient
    import tritonclient.http.aio as aioclient

    arrivals = np.asarray(arrivals, dtype=float)
    clients: dict[str, aioclient.InferenceServerClient] = {}
    result = LoadResult()
    inflight = 0
    inflight_by_addr: dict[str, int] = {}
    closing: set[asyncio.Task] = set()
    rr = 0
    tasks: set[asyncio.Task] = set()
    payload = np.ones(input_shape, dtype=np.float32)
    limit = conn_limit or max(1, max_inflight)

    def client_for(addr: str) -> aioclient.InferenceServerClient:
        c = clients.get(addr)
        if c is None:
            c = clients[addr] = aioclient.InferenceServerClient(addr, conn_limit=limit, conn_timeout=timeout_s)
        return c

    async def emit(rec: RequestRecord) -> None:
        result.records.append(rec)
        if on_result is not None:
            res = on_result(rec)
            if inspect.isawaitable(res):
                await res

    async def one(addr: str, send_t: float, lag_ms: float) -> None:
        nonlocal inflight
        inp = httpclient.InferInput("x", list(input_shape), "FP32")
        inp.set_data_from_numpy(payload, binary_data=True)
        t0 = time.perf_counter()
        ok, err = False, ""
        try:
            await asyncio.wait_for(client_for(addr).infer(model, [inp]), timeout_s)
            ok = True
        except asyncio.TimeoutError:
            err = "timeout"
        except Exception as e:  # connection refused, 5xx, ...
            text = str(e)
            # Triton's queue policy (the operator renders a timeout of twice the p95 target)
            # rejects requests queued too long: a deliberate miss, not a failure of the server.
            kind = "rejected" if "timeout expired" in text.lower() else type(e).__name__
            err = f"{kind}: {text}"[:200]
        latency = (time.perf_counter() - t0) * 1000.0
        inflight -= 1
        inflight_by_addr[addr] -= 1
        await emit(RequestRecord(send_t, latency if ok else float("nan"), ok, addr, err, lag_ms))

    loop_t0 = time.perf_counter()
    result.started_at = time.time()
    try:
        for at in arrivals:
            delay = loop_t0 + float(at) - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.perf_counter() - loop_t0
            lag_ms = max(0.0, (now - float(at)) * 1000.0)
            backends = _backends(url)
            for gone in [a for a in clients if a not in backends and not inflight_by_addr.get(a)]:
                task = asyncio.create_task(_close_quietly(clients.pop(gone)))
                closing.add(task)
                task.add_done_callback(closing.discard)
            if not backends:
                await emit(RequestRecord(now, float("nan"), False, "", "no-backend", lag_ms))
                continue
            if inflight >= max_inflight:
                await emit(RequestRecord(now, float("nan"), False, "", "overflow", lag_ms))
                continue
            addr = backends[rr % len(backends)]
            rr += 1
            inflight += 1
            inflight_by_addr[addr] = inflight_by_addr.get(addr, 0) + 1
            task = asyncio.create_task(one(addr, now, lag_ms))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*list(tasks), return_exceptions=True)
    finally:
        for t in list(tasks):
            t.cancel()
        if tasks:
            await asyncio.gather(*list(tasks), return_exceptions=True)
        if closing:
            await asyncio.gather(*list(closing), return_exceptions=True)
        for c in clients.values():
            try:
                await c.close()
            except Exception:
                pass
        result.duration_s = time.perf_counter() - loop_t0
    result.records.sort(key=lambda r: r.send_time)
    return result
