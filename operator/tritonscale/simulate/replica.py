"""One Triton replica: a dynamic batcher in front of one model instance.

Service model (the same ``a + b*n`` cost as the sandbox's CPU stand-in,
``sandbox/model/model.py``): a batch of ``n`` requests occupies the instance for
``base_ms + per_item_ms * n``. With the defaults (20 ms + 2 ms/item, max batch 16)
a full batch takes 52 ms, so one replica tops out at 16 / 0.052 s ~= 308 rps, while
unbatched it would manage 1 / 0.022 s ~= 45 rps.

Batch formation follows Triton's dynamic batcher (``GetDynamicBatch`` in
triton-inference-server/core ``dynamic_batch_scheduler.cc``), evaluated whenever the
instance is free and the queue is not empty:

* ``max_batch`` or more queued: send ``max_batch`` now;
* the oldest request has waited ``max_queue_delay`` or longer: send everything queued;
* otherwise, if a preferred size can be formed, send the largest preferred size
  (with [4, 8, 16] and 7 queued that is 4; the other 3 wait for the next batch);
* otherwise wait for the arrival that completes the smallest preferred size, or for
  the oldest request's delay to expire, whichever comes first.

Under load the instance is busy for tens of ms while the queue fills, so the delay
has long expired when it frees up: batches are "whatever is queued, up to 16".

Queue policy (``queue_timeout_ms``, Triton's ``default_queue_policy`` with
``timeout_action: REJECT``): when the batcher forms a batch at time s, every queued
request that arrived more than the timeout before s is rejected first, at s. A
rejected request never runs; it counts as a failure in the metrics
(``nv_inference_request_failure``) and as a miss in every score (latency = inf).

The replica is the one mutable object of the simulator, for speed: ``advance`` walks
batches (not requests) in a loop compiled with numba (``_form_batches``; in plain Python,
~1 us per batch, it took a third of the suite's time), and per-request numbers are
derived afterwards with numpy. Requests are served FIFO, so completions are sorted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

# Triton's preferred_batch_sizes in the simulated replica unless given (the sample's).
DEFAULT_PREFERRED = (4, 8, 16)


@dataclass(frozen=True)
class BatcherConfig:
    """Per-replica model cost and Triton ``dynamic_batching`` settings."""

    base_ms: float = 20.0  # a: fixed cost of a batch (kernel launch, pre/post)
    per_item_ms: float = 2.0  # b: extra cost per request in the batch
    max_batch: int = 16
    max_queue_delay_ms: float = 2.0  # Triton max_queue_delay_microseconds = 2000
    preferred: tuple[int, ...] = DEFAULT_PREFERRED
    # Triton's default_queue_policy: a request still queued this long is rejected
    # (timeout_action REJECT) when the batcher next looks at the queue. None: no timeout.
    queue_timeout_ms: float | None = None

    def __post_init__(self) -> None:
        if self.base_ms < 0 or self.per_item_ms < 0 or self.base_ms + self.per_item_ms <= 0:
            raise ValueError("batch cost a + b*n must be positive (a >= 0, b >= 0, a + b > 0)")
        if self.max_batch < 1:
            raise ValueError("max batch must be at least 1")
        if self.max_queue_delay_ms < 0:
            raise ValueError("max queue delay must be >= 0")
        if self.queue_timeout_ms is not None and self.queue_timeout_ms <= 0:
            raise ValueError("queue timeout must be > 0 ms (or none)")
        bad = [p for p in self.preferred if not 1 <= p <= self.max_batch]
        if bad:
            raise ValueError(f"preferred batch sizes {bad} are outside 1..{self.max_batch}")

    def service_s(self, n: int) -> float:
        return (self.base_ms + self.per_item_ms * n) / 1000.0

    @property
    def max_throughput_rps(self) -> float:
        """Saturated throughput: full batches back to back (16 / 52 ms ~= 308 rps by default)."""
        return self.max_batch / self.service_s(self.max_batch)


class _Grow:
    """Append-only float64 array (amortised doubling)."""

    __slots__ = ("a", "n")

    def __init__(self, cap: int = 1024) -> None:
        self.a = np.empty(cap)
        self.n = 0

    def extend(self, x: np.ndarray) -> None:
        m = len(x)
        if self.n + m > len(self.a):
            new = np.empty(max(2 * len(self.a), self.n + m))
            new[: self.n] = self.a[: self.n]
            self.a = new
        self.a[self.n: self.n + m] = x
        self.n += m

    @property
    def view(self) -> np.ndarray:
        return self.a[: self.n]


def _preferred_table(cfg: BatcherConfig) -> tuple[np.ndarray, int]:
    """(largest preferred size <= q for q = 0..max_batch, 0 where none can be formed yet; the
    smallest preferred size, or max_batch without any)."""
    prefs = sorted(set(cfg.preferred))
    table = np.array([max([p for p in prefs if p <= q], default=0) for q in range(cfg.max_batch + 1)], dtype=np.int64)
    return table, (prefs[0] if prefs else cfg.max_batch)


@njit(cache=True)
def _form_batches(arr: np.ndarray, h: int, n: int, free: float, a: float, b: float, B: int, delay: float,
                  pref: np.ndarray, pmin: int, timeout: float, until: float, known_until: float,
                  starts: np.ndarray, sizes: np.ndarray, nb: int) -> tuple[int, float, int]:  # pragma: no cover
    """Triton's dynamic batcher over the queue ``arr[h:n]`` (sorted arrival times), the instance idle
    from ``free``: form every batch that starts before ``until`` (see ``Replica.advance``), into
    ``starts``/``sizes`` from index ``nb``. Returns (head, free, nb); it stops early when the
    buffers are full (nb == len(sizes)), and a second call goes on from there."""
    cap = len(sizes)
    while h < n and nb < cap:
        first = float(arr[h])
        s = free if free > first else first
        if s >= until:
            break
        if s - first > timeout:
            # queue policy: everything that has waited past the timeout is rejected now
            k = h + int(np.searchsorted(arr[h:n], s - timeout, "left"))
            starts[nb] = s
            sizes[nb] = h - k
            nb += 1
            h = k
            continue
        hi = h + B
        if hi > n:
            hi = n
        q = int(np.searchsorted(arr[h:hi], s, "right"))
        if q < B:
            deadline = first + delay
            if s < deadline:  # the oldest request may still wait for company
                p = pref[q]
                if p:
                    q = p
                else:
                    k = h + pmin - 1
                    if k < n and arr[k] <= deadline:
                        s, q = float(arr[k]), pmin  # the smallest preferred size is complete
                    elif deadline < known_until:
                        s = deadline
                        q = int(np.searchsorted(arr[h:hi], s, "right"))
                    else:
                        break  # cannot know yet who arrives before the deadline
        starts[nb] = s
        sizes[nb] = q
        nb += 1
        free = s + a + b * q
        h += q
    return h, free, nb


class Replica:
    """A replica's queue and model instance, plus what it has served so far.

    Lifecycle (times in seconds): ``created`` (pod scheduled; costs from here),
    ``ready_at`` = created + cold start (receives traffic from here), ``removed``
    (scale-down: no new traffic; the queue drains, then the pod is gone).
    """

    def __init__(self, rid: int, created: float, ready_at: float, cfg: BatcherConfig) -> None:
        self.rid = rid
        self.created = created
        self.ready_at = ready_at
        self.removed: float | None = None
        self.cfg = cfg
        self._a = cfg.base_ms / 1000.0
        self._b = cfg.per_item_ms / 1000.0
        self._B = cfg.max_batch
        self._delay = cfg.max_queue_delay_ms / 1000.0
        self._timeout = math.inf if cfg.queue_timeout_ms is None else cfg.queue_timeout_ms / 1000.0
        self._pref, self._pmin = _preferred_table(cfg)
        # queue: the arrivals not yet in a batch are arrivals[head:]; those before head and after
        # the last sync() are in the batches formed since (the batch buffers' first nb entries)
        self._head = 0
        self._free = -math.inf  # the instance is idle from this time
        self._bstart = np.empty(256)
        self._bsize = np.empty(256, dtype=np.int64)  # > 0: a batch run; < 0: that many requests rejected
        self._nb = 0
        # every arrival routed here; served FIFO, so request i of req_start/req_end is arrival i
        self.arrivals = _Grow()
        # per request leaving the queue, in arrival order: batch start and batch end
        # (completion); for a rejected request both are the rejection time
        self.req_start = _Grow()
        self.req_end = _Grow()
        self.req_rejected = _Grow()  # 1.0 for a rejected request, else 0.0
        # every queue exit (batch or rejection): its time and the cumulative requests gone
        self.exit_time = _Grow(256)
        self.exit_cum = _Grow(256)
        # per batch: start, end, cumulative busy seconds up to and including it
        self.batch_start = _Grow(256)
        self.batch_end = _Grow(256)
        self.batch_busy_cum = _Grow(256)
        self.batch_size_cum = _Grow(256)
        # Triton's counters, as step functions: nv_inference_request_success is batch_size_cum at
        # batch_end; nv_inference_queue_duration_us is batch_queue_cum (seconds) at batch_end;
        # nv_inference_request_failure is reject_cum at reject_time
        self.batch_queue_cum = _Grow(256)
        self.reject_time = _Grow(64)
        self.reject_cum = _Grow(64)

    def reconfigure(self, t: float, cfg: BatcherConfig, pause_s: float) -> None:
        """New batcher settings from ``t`` (the batches formed before it stay as they were): the
        model reload that applies them holds the instance for ``pause_s`` after any running batch;
        what arrives meanwhile queues (and may time out). Call after ``advance(t, t)``."""
        self.cfg = cfg
        self._delay = cfg.max_queue_delay_ms / 1000.0
        self._pref, self._pmin = _preferred_table(cfg)
        self._free = max(self._free, t) + pause_s

    # -- traffic ------------------------------------------------------------------------
    def add(self, times: np.ndarray) -> None:
        """Route arrivals (sorted, all later than anything routed before) to this replica."""
        self.arrivals.extend(times)

    @property
    def served(self) -> int:
        """Requests out of the queue so far, run or rejected (after ``sync``)."""
        return self.req_end.n

    def latencies(self) -> np.ndarray:
        """Seconds from arrival to completion of every request out of the queue, in arrival
        order; a rejected request's latency is inf (a miss whatever the target)."""
        self.sync()
        lat = self.req_end.view - self.arrivals.a[: self.req_end.n]
        if self._timeout != math.inf:
            lat = np.where(self.req_rejected.view > 0, np.inf, lat)
        return lat

    def advance(self, until: float, known_until: float) -> None:
        """Form and run every batch that starts before ``until``.

        ``known_until``: every arrival before this time has been routed here already, so
        a batch whose start depends on arrivals up to t may start if t < known_until.
        """
        while True:
            self._head, self._free, self._nb = _form_batches(
                self.arrivals.a, self._head, self.arrivals.n, self._free, self._a, self._b, self._B, self._delay,
                self._pref, self._pmin, self._timeout, float(until), float(known_until), self._bstart, self._bsize,
                self._nb)
            if self._nb < len(self._bsize):
                return
            # the batch buffers are full: grow them and go on from where the kernel stopped
            self._bstart = np.concatenate([self._bstart, np.empty(len(self._bstart))])
            self._bsize = np.concatenate([self._bsize, np.empty(len(self._bsize), dtype=np.int64)])

    def sync(self) -> None:
        """Move batches formed since the last call into the per-request/per-batch arrays."""
        nb = self._nb
        if nb == 0:
            return
        st_all = self._bstart[:nb].copy()
        sz_all = self._bsize[:nb].copy()
        run = sz_all > 0
        count = np.abs(sz_all)
        m = int(count.sum())
        en_all = np.where(run, st_all + self._a + self._b * sz_all, st_all)
        st, sz, en = st_all[run], sz_all[run], en_all[run]
        prev_busy = self.batch_busy_cum.a[self.batch_busy_cum.n - 1] if self.batch_busy_cum.n else 0.0
        prev_size = self.batch_size_cum.a[self.batch_size_cum.n - 1] if self.batch_size_cum.n else 0.0
        prev_exit = self.exit_cum.a[self.exit_cum.n - 1] if self.exit_cum.n else 0.0
        prev_queue = self.batch_queue_cum.a[self.batch_queue_cum.n - 1] if self.batch_queue_cum.n else 0.0
        prev_reject = self.reject_cum.a[self.reject_cum.n - 1] if self.reject_cum.n else 0.0
        n0 = self.req_end.n
        waited = np.repeat(st_all, count) - self.arrivals.a[n0:n0 + m]  # queue seconds per request
        per_batch = np.add.reduceat(waited, np.concatenate(([0], np.cumsum(count)[:-1])))
        self.batch_queue_cum.extend(prev_queue + np.cumsum(per_batch[run]))
        if not run.all():
            self.reject_time.extend(st_all[~run])
            self.reject_cum.extend(prev_reject + np.cumsum(count[~run]))
        self.batch_start.extend(st)
        self.batch_end.extend(en)
        self.batch_busy_cum.extend(prev_busy + np.cumsum(en - st))
        self.batch_size_cum.extend(prev_size + np.cumsum(sz))
        self.exit_time.extend(st_all)
        self.exit_cum.extend(prev_exit + np.cumsum(count))
        self.req_start.extend(np.repeat(st_all, count))
        self.req_end.extend(np.repeat(en_all, count))
        self.req_rejected.extend(np.repeat((~run).astype(float), count))
        self._nb = 0

    # -- what the replica's Triton /metrics would report -----------------------------------
    @property
    def busy_until(self) -> float:
        return self._free

    def pending_at(self, t: float) -> int:
        """Requests received by ``t`` and not yet in an executing batch (nv_inference_pending_request_count)."""
        self.sync()
        arrived = int(np.searchsorted(self.arrivals.view, t, side="right"))
        i = int(np.searchsorted(self.exit_time.view, t, side="right"))
        gone = int(self.exit_cum.a[i - 1]) if i else 0
        return max(0, arrived - gone)

    def busy_seconds(self, t0: float, t1: float) -> float:
        """Seconds the instance spent executing batches within (t0, t1]."""
        self.sync()
        s, e, cum = self.batch_start.view, self.batch_end.view, self.batch_busy_cum.view
        i0 = int(np.searchsorted(e, t0, side="right"))  # first batch ending after t0
        i1 = int(np.searchsorted(s, t1, side="left"))  # batches starting before t1
        if i1 <= i0:
            return 0.0
        total = cum[i1 - 1] - (cum[i0 - 1] if i0 else 0.0)
        total -= max(0.0, t0 - s[i0])  # clip the first batch at t0
        total -= max(0.0, e[i1 - 1] - t1)  # and the last at t1
        return max(0.0, float(total))
