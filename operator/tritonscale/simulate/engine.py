"""The cluster simulation: arrivals, replicas with cold starts, and one autoscaler.

Time advances in segments between *events*: autoscaler ticks and replicas becoming
ready. Inside a segment the set of ready replicas is fixed, so routing is a pure
function of the arrival order:

* Routing is round-robin over the ready replicas in the order they became ready
  (kube-proxy's IPVS mode). The pointer carries over between segments. ``routing="random"``
  sends each request to a ready replica drawn uniformly instead (kube-proxy's iptables mode,
  per request): the same long-run share, but each replica then sees Poisson arrivals, where
  round-robin makes every N-th arrival far more regular. Each arrival's draw is fixed before
  the run (``routing_draws``, seeded by ``routing_seed``), so every policy's cluster routes the
  same request by the same draw: policies are compared on the same luck, not only the same
  arrivals. ``routing="connection"`` routes connections, as kube-proxy does for gRPC clients:
  each request belongs to one of ``connections`` clients (drawn uniformly, fixed before the run),
  and a client's requests go to the pod its connection reached. The connection picks a ready pod
  at random when it opens, at the client's first request, and again at the first request after it
  closed: its pod left, or Triton closed it at ``connection_age_s`` (``--grpc-max-connection-age``,
  with gRPC's +-10% jitter; the first connections at a random phase of it, as clients that started
  earlier). A pod that becomes ready gets only connections opened after it did; 0 never closes one.
* Scale-up creates pods at once; each serves only after the cold start
  (``cold_start_s``, default 60 s: image pull, Triton start, model load and warm-up).
* Scale-down removes the newest pods first -- pods still starting before ready
  ones, so a cancelled scale-up costs nothing more -- and a removed ready pod gets no
  new requests but finishes its queue (terminationGracePeriod) before it goes.

Cost is the pods' lifetime (creation to removal or end of drain) within
[0, horizon]: a starting pod already holds its GPU.

Every run is deterministic: the arrivals are given, routing is round-robin (or seeded) and
the policies are deterministic functions of what they observe.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from numba import njit

from tritonscale.api.spec import DEFAULT_GRPC_MAX_CONNECTION_AGE_S
from tritonscale.render.kubernetes_objects import MAX_SURGE, max_surge
from tritonscale.scaling.decider import Observation
from tritonscale.simulate import metrics_view
from tritonscale.simulate.metrics_view import PromConfig
from tritonscale.simulate.replica import BatcherConfig, Replica

# A batcher change reaches the replicas by a rollout in the operator (the config hash; chosen
# over a model-control reload by e2e/bench_batching_apply.py), and the simulator does the same
# by default ("rollout"): like the operator's Deployment (maxUnavailable 0; maxSurge 100% for a
# tuner's change, 25% otherwise), extra pods with the new settings start (a cold start each), up to
# the surge of the replicas at once, and as each is ready one old pod drains and goes and the next
# starts, until none is left; the extra pods are not in the replica count the autoscaler sees
# (spec.replicas). "reload" models Triton's model-control reload instead: each replica's
# instance pauses RELOAD_PAUSE_S, one replica after the other (2 s is the sandbox CPU model's
# load time; TESTING.md: cold start to ready ~1.5-2 s).
RELOAD_PAUSE_S = 2.0
BATCHING_APPLY = ("rollout", "reload")
ROUTINGS = ("round-robin", "random", "connection")  # ClusterConfig.routing
# routing="connection": the clients (one connection each) and the age Triton closes them at, the
# operator's default (spec.runtime.grpcMaxConnectionAgeSeconds). A thousand: with tens of clients the
# luck of which pod each reached overloads some pods whatever the fleet -- with 64 clients and a 30 s age
# the static peak fleet met 27 and 53 of 60 windows in ramps/cold60s/loose/seed0 and
# flash/cold60s/tight/seed0, 48 and 53 with 1000, 60 and 60 routed per request (session 72).
CONNECTIONS = 1000
CONNECTION_AGE_S = float(DEFAULT_GRPC_MAX_CONNECTION_AGE_S)
# Removed pods stay in the View this long (or the rate window, if longer): longer than any
# rate() range a policy reads, so pruning them changes no figure, only the work per tick.
RETIRED_KEEP_S = 600.0


@dataclass(frozen=True)
class ClusterConfig:
    batcher: BatcherConfig = field(default_factory=BatcherConfig)
    cold_start_s: float = 60.0
    min_replicas: int = 1
    max_replicas: int = 20
    prom: PromConfig = field(default_factory=PromConfig)
    reload_pause_s: float = RELOAD_PAUSE_S
    batching_apply: str = "rollout"  # how a tuned batcher reaches the replicas (BATCHING_APPLY)
    routing: str = "round-robin"  # how requests reach the ready replicas (ROUTINGS)
    routing_seed: int = 0  # routing="random" or "connection": the draws' seed
    connections: int = CONNECTIONS  # routing="connection": the clients, each with one connection
    connection_age_s: float = CONNECTION_AGE_S  # routing="connection": Triton closes one at this age (0: never)

    def __post_init__(self) -> None:
        if self.batching_apply not in BATCHING_APPLY:
            raise ValueError(f"batching apply must be one of {', '.join(BATCHING_APPLY)}")
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}")
        if self.cold_start_s < 0:
            raise ValueError("cold start must be >= 0 s")
        if self.connections < 1:
            raise ValueError("need at least 1 connection")
        if self.connection_age_s < 0:
            raise ValueError("connection age must be >= 0 s")
        if self.reload_pause_s < 0:
            raise ValueError("reload pause must be >= 0 s")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 1 <= min replicas <= max replicas")


def routing_draws(cfg: ClusterConfig, n: int) -> np.ndarray | None:
    """``routing="random"`` (and "connection"): one uniform draw in [0, 1) per arrival, from
    ``routing_seed``; a request whose draw is u goes to ready replica floor(u x k) of the k ready when
    it arrives (under "connection", only a request that opens a connection). None for round-robin."""
    return np.random.default_rng([cfg.routing_seed, 1]).random(n) if cfg.routing != "round-robin" else None


@dataclass
class Connections:
    """``routing="connection"``: each arrival's client and jitter draw (fixed before the run), and each
    client's connection: the pod it reached (-1: none yet) and when Triton closes it."""

    client: np.ndarray  # per arrival, in [0, connections)
    jitter: np.ndarray  # per arrival, uniform in [0, 1): the age of a connection it opens
    pod: np.ndarray  # per client: the rid its connection reached, -1 before its first request
    closes: np.ndarray  # per client: when its connection closes

    @classmethod
    def draw(cls, cfg: ClusterConfig, n: int) -> Connections:
        rng = np.random.default_rng([cfg.routing_seed, 2])
        return cls(rng.integers(0, cfg.connections, n), rng.random(n),
                   np.full(cfg.connections, -1, dtype=np.int64), np.full(cfg.connections, np.inf))


@njit(cache=True)
def _connection_route(times: np.ndarray, client: np.ndarray, draws: np.ndarray, jitter: np.ndarray,
                      ready: np.ndarray, live: np.ndarray, pod: np.ndarray, closes: np.ndarray,
                      age: float) -> np.ndarray:  # pragma: no cover - compiled
    out = np.empty(len(times), dtype=np.int64)
    k = len(ready)
    for i in range(len(times)):
        c = client[i]
        p = pod[c]
        if p < 0 or not live[p] or times[i] >= closes[c]:
            p = ready[min(int(draws[i] * k), k - 1)]
            if age > 0.0:
                # a client's first connection at a random phase of the age, the next ones at it +-10%
                closes[c] = times[i] + age * (jitter[i] if pod[c] < 0 else 0.9 + 0.2 * jitter[i])
            pod[c] = p
        out[i] = p
    return out


def route_connections(seg: np.ndarray, ready: Sequence[int], n_pods: int, conns: Connections, lo: int,
                      draws: np.ndarray, age_s: float) -> np.ndarray:
    """The rid each of ``seg``'s arrivals (arrivals ``lo``.. of the run) goes to under
    ``routing="connection"``, with ``ready`` the rids of the ready pods (``n_pods`` created so far);
    updates ``conns``."""
    live = np.zeros(n_pods, dtype=np.bool_)
    rids = np.asarray(ready, dtype=np.int64)
    live[rids] = True
    hi = lo + len(seg)
    return _connection_route(seg, conns.client[lo:hi], draws[lo:hi], conns.jitter[lo:hi], rids, live,
                             conns.pod, conns.closes, float(age_s))


def route(seg: np.ndarray, k: int, draws: np.ndarray | None = None, first: int = 0) -> list[np.ndarray]:
    """``seg``'s arrivals split among ``k`` ready replicas, one array each: round-robin, replica
    ``first`` taking the first arrival, or, with ``draws`` (``routing_draws`` of these arrivals),
    each to replica floor(u x k). The cluster and the oracle's windows route by this alone."""
    if draws is None:
        return [seg[(j - first) % k::k] for j in range(k)]
    to = (draws * k).astype(np.int64)
    return [seg[to == j] for j in range(k)]


@dataclass
class View:
    """What an autoscaler can see at ``now``: replica counts and Prometheus-style metrics."""

    now: float
    current: int  # pods that exist and are not being removed (starting + ready)
    ready: int
    pods: Sequence[Replica]  # ready pods (scraped by Prometheus)
    prom: PromConfig
    startups: tuple[float, ...] = ()  # creation-to-ready seconds of pods ready since the last tick
    rolling: bool = False  # a batcher change is still rolling out (pods with old settings remain)
    # pods removed within RETIRED_KEEP_S after serving: their series end, but rate() over a
    # window still counts what they served before their last scrape
    retired: Sequence[Replica] = ()

    def observe(self) -> Observation:
        return metrics_view.observe(self.pods, self.now, self.prom, self.retired)

    def utilisation(self) -> list[float | None]:
        return metrics_view.pod_utilisation(self.pods, self.now, self.prom)

    def request_rate(self) -> float | None:
        return metrics_view.request_rate(self.pods, self.now, self.prom, self.retired)

    def queue_ms(self, window_s: float) -> list[float | None]:
        return metrics_view.pod_queue_ms(self.pods, self.now, self.prom, window_s)

    def pool_quantile_ms(self, q: float, window_s: float = 60.0) -> float | None:
        if window_s > RETIRED_KEEP_S:
            raise ValueError(f"rate window {window_s} s is longer than the removed pods kept ({RETIRED_KEEP_S} s)")
        return metrics_view.pool_quantile_ms(self.pods, self.now, self.prom, q, window_s, self.retired)

    def concurrency(self, window_s: float) -> float:
        """The fleet's requests in flight averaged over the window, removed pods' included while they
        served: Knative's autoscaler averages the fleet-wide totals it recorded at each scrape and never
        rescales them when pods go. Over the ready pods alone a scale-down took its pods' share of the last
        minute out of the window at once, and the KPA halved again into overload every tick (auditF,
        session 84)."""
        return metrics_view.mean_concurrency([*self.pods, *self.retired], max(0.0, self.now - window_s), self.now)


class Autoscaler(Protocol):
    name: str

    def initial_replicas(self, default: int) -> int: ...

    def tick_times(self, horizon: float) -> np.ndarray: ...

    def step(self, view: View) -> tuple[int, str]: ...


@dataclass(frozen=True)
class TickRecord:
    t: float
    current: int
    ready: int
    desired: int
    reason: str
    batching: str = ""  # --batching-tuner: the tuner's verdict at this tick ("Reason: message")


@dataclass
class RunResult:
    policy: str
    horizon: float
    arrival: np.ndarray  # per request, sorted
    latency: np.ndarray  # seconds, aligned with ``arrival``
    pods: list[tuple[float, float | None, float, float | None]]  # created, ready_at, gone, removed
    ticks: list[TickRecord]
    cold_starts: int  # pods started cold: scale-ups, and a batcher rollout's replacements
    scale_events: int
    # (time, reason, settings) of each batcher change the scaler made (its ``tunings``: the tuner's)
    tunings: tuple[tuple[float, str, str], ...] = ()

    def replica_seconds(self) -> float:
        return float(sum(max(0.0, min(gone, self.horizon) - created) for created, _, gone, _ in self.pods))

    def replicas_over_time(self, times: np.ndarray, ready_only: bool = False) -> np.ndarray:
        """Pods alive (or ready and routed, with ``ready_only``) at each time."""
        out = np.zeros(len(times), dtype=int)
        for created, ready_at, gone, removed in self.pods:
            if ready_only:
                if ready_at is None:
                    continue
                lo, hi = ready_at, (removed if removed is not None else math.inf)
            else:
                lo, hi = created, gone
            out += (times >= lo) & (times < hi)
        return out


def simulate(arrivals: np.ndarray, scaler: Autoscaler, cfg: ClusterConfig,
             horizon: float | None = None) -> RunResult:
    """Run ``scaler`` against ``arrivals`` (sorted seconds) until every request is served."""
    arrivals = np.asarray(arrivals, dtype=float)
    if horizon is None:
        horizon = float(arrivals[-1]) if len(arrivals) else 0.0
    horizon = max(horizon, float(arrivals[-1]) if len(arrivals) else 0.0)
    cold = cfg.cold_start_s

    all_pods: list[Replica] = []
    alive: list[Replica] = []  # not removed: starting + ready, in creation order
    routed: list[Replica] = []  # ready and not removed, in ready order
    retired: list[Replica] = []  # removed after serving, within RETIRED_KEEP_S (for rate())
    pending_ready: list[tuple[float, int]] = []  # heap of (ready_at, rid)
    by_id: dict[int, Replica] = {}

    # An autoscaler that also sets the batcher (``tritonscale --batching-tuner``) has a ``batcher``
    # attribute: the engine starts from it, and applies a changed one after each step (a rollout or a
    # reload, ``ClusterConfig``).
    batcher = getattr(scaler, "batcher", None) or cfg.batcher

    old: list[Replica] = []  # a rollout's pods with the settings from before it, still to replace
    surge: list[Replica] = []  # the rollout's extra pods while they start (at most maxSurge)

    cold_starts = 0

    def create(t: float, warm: bool) -> Replica:
        nonlocal cold_starts
        cold_starts += 0 if warm else 1
        r = Replica(len(all_pods), t, t if warm else t + cold, batcher)
        all_pods.append(r)
        by_id[r.rid] = r
        alive.append(r)
        if warm:
            routed.append(r)
        else:
            heapq.heappush(pending_ready, (r.ready_at, r.rid))
        return r

    def remove(victim: Replica, t: float) -> None:
        alive.remove(victim)
        victim.removed = t
        if victim in old:
            old.remove(victim)
        if victim in routed:
            routed.remove(victim)
            retired.append(victim)
            victim.advance(math.inf, math.inf)  # drain: no new arrivals will come
        if victim in surge:
            surge.remove(victim)
        while len(surge) > len(old):  # more extra pods than old ones left to replace: not needed
            remove(surge[-1], t)

    def roll(t: float) -> None:
        """Start extra pods while old pods remain to be replaced, up to maxSurge starting at once (the
        scaler's ``rollout_surge`` for its batcher change: every pod at once, since session 101)."""
        limit = max_surge(len(alive) - len(surge), getattr(scaler, "rollout_surge", MAX_SURGE))
        while len(surge) < min(limit, len(old)):
            surge.append(create(t, warm=False))

    def surge_ready(r: Replica, t: float) -> None:
        """An extra pod is ready: it replaces an old pod, and the next one starts."""
        surge.remove(r)
        if old:
            remove(old[0], t)
        roll(t)

    n0 = min(max(scaler.initial_replicas(cfg.min_replicas), 1), cfg.max_replicas)
    for _ in range(n0):
        create(0.0, warm=True)
    # The warm pods started one cold start before the run: their creation and Ready times are in
    # the API, and a scaler's first tick reads them (the operator's first census of a service).
    startups: list[float] = [cold] * n0

    ticks = np.asarray(scaler.tick_times(horizon), dtype=float)
    ticks = ticks[(ticks > 0) & (ticks < horizon)]
    ti = 0
    rr = 0  # round-robin pointer
    draws = routing_draws(cfg, len(arrivals))
    conns = Connections.draw(cfg, len(arrivals)) if cfg.routing == "connection" else None
    pos = 0  # next arrival to route
    records: list[TickRecord] = []
    scale_events = 0

    while True:
        t_next = horizon
        if ti < len(ticks):
            t_next = min(t_next, ticks[ti])
        if pending_ready:
            t_next = min(t_next, pending_ready[0][0])
        last = t_next >= horizon
        # route arrivals up to t_next -- the final segment takes everything left
        end = len(arrivals) if last else int(np.searchsorted(arrivals, t_next, side="left"))
        if end > pos:
            k = len(routed)
            if k == 0:
                raise RuntimeError("no ready replica to route to")  # cannot happen: >= 1 pod always ready
            seg = arrivals[pos:end]
            if conns is not None and draws is not None:
                to = route_connections(seg, [r.rid for r in routed], len(all_pods), conns, pos, draws,
                                       cfg.connection_age_s)
                for r in routed:
                    r.add(seg[to == r.rid])
            else:
                for r, part in zip(routed, route(seg, k, None if draws is None else draws[pos:end], rr),
                                   strict=True):
                    r.add(part)
            rr = (rr + (end - pos)) % k
            pos = end
        for r in routed:
            r.advance(t_next, t_next)
        if last:
            break
        while pending_ready and pending_ready[0][0] <= t_next:
            _, rid = heapq.heappop(pending_ready)
            r = by_id[rid]
            if r.removed is None:
                routed.append(r)
                startups.append(r.ready_at - r.created)
                if r in surge:
                    surge_ready(r, t_next)
        if ti < len(ticks) and ticks[ti] <= t_next:
            ti += 1
            current = len(alive) - len(surge)  # spec.replicas: the rollout's extra pod is not in it
            keep = max(RETIRED_KEEP_S, cfg.prom.window_s)
            retired[:] = [r for r in retired if r.removed is not None and r.removed > t_next - keep]
            view = View(t_next, current, len(routed), tuple(routed), cfg.prom, tuple(startups),
                        rolling=bool(old or surge), retired=tuple(retired))
            startups.clear()
            desired, reason = scaler.step(view)
            tuned = getattr(scaler, "batcher", None)
            if tuned is not None and tuned != batcher:
                batcher = tuned
                if cfg.batching_apply == "reload":
                    for i, r in enumerate(alive):  # rolling reload: one replica after the other
                        r.advance(t_next, t_next)
                        r.reconfigure(t_next + i * cfg.reload_pause_s, tuned, cfg.reload_pause_s)
                else:
                    # a scale-up's pods still starting (``TunerObservation.starting``) started with the old
                    # settings: the rollout replaces them too (first, as the Deployment controller deletes a pod
                    # not ready before a ready one; checked on the real controllers by the integration test
                    # test_a_tuner_change_during_a_scale_up_replaces_the_starting_pods_before_the_ready_ones)
                    old[:] = [r for r in alive if r not in routed and r not in surge and r.cfg != tuned] + \
                        [r for r in routed if r.cfg != tuned]
                    roll(t_next)
            desired = min(max(int(desired), cfg.min_replicas), cfg.max_replicas)
            records.append(TickRecord(t_next, current, len(routed), desired, reason,
                                      getattr(scaler, "tuner_verdict", "")))
            if desired != current:
                scale_events += 1
            for _ in range(desired - current):
                create(t_next, warm=False)
            for _ in range(current - desired):
                # newest first: a pod still starting goes before any ready one (a rollout's old
                # pods before its new ones; its extra pod only once nothing is left to replace)
                starting = [r for r in alive if r not in routed and r not in surge]
                victim = (starting[-1] if starting else old[-1] if old
                          else max(routed, key=lambda r: (r.ready_at, r.rid)))
                remove(victim, t_next)

    for r in all_pods:
        r.advance(math.inf, math.inf)
        r.sync()
    pods = []
    for r in all_pods:
        served = r.removed is None or r.ready_at <= r.removed
        gone = horizon if r.removed is None else r.removed
        if r.removed is not None and r.req_end.n:
            gone = max(gone, float(r.req_end.a[r.req_end.n - 1]))  # drained its queue first
        pods.append((r.created, r.ready_at if served else None, gone, r.removed))
    arr = np.concatenate([r.arrivals.view for r in all_pods]) if all_pods else np.empty(0)
    lat = np.concatenate([r.latencies() for r in all_pods]) if all_pods else np.empty(0)
    order = np.argsort(arr, kind="stable")
    return RunResult(scaler.name, horizon, arr[order], lat[order], pods, records, cold_starts, scale_events,
                     tuple(getattr(scaler, "tunings", ())))
