"""Closed-loop gRPC clients of a real tritonserver, counting their reconnections.

A gRPC client keeps one HTTP/2 connection and sends every request over it, so behind a Kubernetes
Service (which balances connections, not requests) it stays on one replica until the connection
closes. ``spec.runtime.grpcMaxConnectionAgeSeconds`` has Triton close each connection at an age;
these clients measure what that costs a client (requests, latency, errors) and show it happen: each
client's channel goes back to READY once per reconnection (grpc's connectivity callback).

Used by ``tests/sandbox/test_runtime_real.py`` and ``e2e/bench_grpc_connection_age.py``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import tritonclient.grpc as grpcclient


@dataclass
class GrpcLoadResult:
    seconds: float
    latencies_s: list[float] = field(default_factory=list)  # of the requests that succeeded
    errors: list[str] = field(default_factory=list)
    error_times_s: list[float] = field(default_factory=list)  # when each failed request was sent, from the start
    connections: int = 0  # times a channel became READY, summed over the clients
    clients: int = 1

    @property
    def requests(self) -> int:
        return len(self.latencies_s) + len(self.errors)

    @property
    def reconnections(self) -> int:
        """Connections beyond each client's first."""
        return max(0, self.connections - self.clients)

    def percentile_ms(self, q: float) -> float:
        """The q-th percentile of the successful requests' latency, ms (nan without one)."""
        return float(np.percentile(self.latencies_s, q) * 1e3) if self.latencies_s else float("nan")

    def p95_ms(self) -> float:
        return self.percentile_ms(95)

    def rate(self) -> float:
        return len(self.latencies_s) / self.seconds if self.seconds > 0 else 0.0


def run_grpc_clients(address: str, model: str, seconds: float, clients: int = 1,
                     input_name: str = "x", shape: tuple[int, ...] = (1, 4)) -> GrpcLoadResult:
    """``clients`` threads, each with its own channel to ``address`` (``host:port``), sending FP32
    requests of ``shape`` one after the other for ``seconds``."""
    out = GrpcLoadResult(seconds=seconds, clients=clients)
    lock = threading.Lock()
    start = time.monotonic()
    stop = start + seconds

    def client() -> None:
        c = grpcclient.InferenceServerClient(address)
        ready = 0

        def on_state(state: grpc.ChannelConnectivity) -> None:
            nonlocal ready
            if state == grpc.ChannelConnectivity.READY:
                ready += 1

        # tritonclient keeps its channel private; the connectivity callback is grpc's own API
        c._channel.subscribe(on_state, try_to_connect=False)
        inp = grpcclient.InferInput(input_name, list(shape), "FP32")
        inp.set_data_from_numpy(np.ones(shape, np.float32))
        lat: list[float] = []
        errs: list[str] = []
        errs_at: list[float] = []
        try:
            while time.monotonic() < stop:
                t0 = time.monotonic()
                try:
                    c.infer(model, [inp], client_timeout=10.0)
                    lat.append(time.monotonic() - t0)
                except Exception as e:  # every failure is a counted result
                    errs.append(f"{type(e).__name__}: {str(e)[:200]}")
                    errs_at.append(t0 - start)
        finally:
            c._channel.unsubscribe(on_state)
            c.close()
        with lock:
            out.latencies_s += lat
            out.errors += errs
            out.error_times_s += errs_at
            out.connections += ready

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 30)
    return out
