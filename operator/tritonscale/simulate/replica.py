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
derived afterwards by a second compiled loop (``_record_batches``, which replaced some twenty
numpy calls per sync; with two smaller changes, the whole suite went from 893 s to 384 s).
Requests are served FIFO, so completions are sorted.
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
        self.reserve(m)[self.n: self.n + m] = x
        self.n += m

    def reserve(self, m: int) -> np.ndarray:
        """Room for ``m`` more values (written by a kernel, which then moves ``n``): the array."""
        if self.n + m > len(self.a):
            new = np.empty(max(2 * len(self.a), self.n + m))
            new[: self.n] = self.a[: self.n]
            self.a = new
        return self.a

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
        cut = s - timeout
        if first < cut:
            # queue policy: everything that has waited past the timeout is rejected now -- the test the
            # search counts by: `s - first > timeout` can hold where `first < s - timeout` does not (float
            # rounding: first 4.164, s 4.364, timeout 0.2), and a batch of no request, the head unmoved,
            # looped until the buffers filled memory (a periodic trace every 3 ms; an exploration, session 55)
            k = h + int(np.searchsorted(arr[h:n], cut, "left"))
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


@njit(cache=True)
def _pairwise_sum(x: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover
    """numpy's pairwise summation of ``x[lo:lo + n]`` (``pairwise_sum`` in its loops), operation for
    operation, so that the kernel below reproduces ``np.add.reduceat`` to the bit."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res += x[lo + i]
        return res
    if n <= 128:
        r = x[lo:lo + 8].copy()
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] += x[lo + i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            res += x[lo + i]
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise_sum(x, lo, n2) + _pairwise_sum(x, lo + n2, n - n2)


@njit(cache=True)
def _record_batches(starts: np.ndarray, sizes: np.ndarray, nb: int, a: float, b: float, arrivals: np.ndarray,
                    n0: int, m: int, req: tuple, exits: tuple, ne: int, batches: tuple, nbt: int, rejects: tuple,
                    nrj: int, prev: np.ndarray) -> tuple[int, int]:  # pragma: no cover
    """``Replica.sync``'s bookkeeping for the ``nb`` batches formed since the last call, written in
    place at the arrays' current lengths (request ``n0``, exit ``ne``, batch ``nbt``, rejection
    ``nrj``): what numpy did in some twenty calls per sync, with the same arithmetic in the same
    order (``prev``: the last busy, size, exit, queue and rejection totals; ``m``: the requests the
    batches took). Returns (batches run, rejections)."""
    req_start, req_end, req_rejected = req
    exit_time, exit_cum = exits
    batch_start, batch_end, busy_cum, size_cum, queue_cum = batches
    reject_time, reject_cum = rejects
    waited = np.empty(m)  # queue seconds per request
    busy, size, gone, queued, rejected = 0.0, 0, 0, 0.0, 0
    p = n0
    runs = 0
    rejs = 0
    for j in range(nb):
        s = starts[j]
        k = sizes[j]
        run = k > 0
        c = k if run else -k
        e = s + a + b * k if run else s
        for i in range(c):
            req_start[p + i] = s
            req_end[p + i] = e
            req_rejected[p + i] = 0.0 if run else 1.0
            waited[p - n0 + i] = s - arrivals[p + i]
        gone += c
        exit_time[ne + j] = s
        exit_cum[ne + j] = prev[2] + gone
        if run:
            busy += e - s
            size += k
            queued += waited[p - n0] + _pairwise_sum(waited, p - n0 + 1, c - 1)
            batch_start[nbt + runs] = s
            batch_end[nbt + runs] = e
            busy_cum[nbt + runs] = prev[0] + busy
            size_cum[nbt + runs] = prev[1] + size
            queue_cum[nbt + runs] = prev[3] + queued
            runs += 1
        else:
            rejected += c
            reject_time[nrj + rejs] = s
            reject_cum[nrj + rejs] = prev[4] + rejected
            rejs += 1
        p += c
    return runs, rejs


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
        n0 = self.req_end.n
        m = self._head - n0  # the requests those batches took out of the queue
        req = (self.req_start.reserve(m), self.req_end.reserve(m), self.req_rejected.reserve(m))
        batches = (self.batch_start, self.batch_end, self.batch_busy_cum, self.batch_size_cum, self.batch_queue_cum)
        prev = np.array([g.a[g.n - 1] if g.n else 0.0 for g in
                         (self.batch_busy_cum, self.batch_size_cum, self.exit_cum, self.batch_queue_cum,
                          self.reject_cum)])
        runs, rejs = _record_batches(
            self._bstart, self._bsize, nb, self._a, self._b, self.arrivals.a, n0, m, req,
            (self.exit_time.reserve(nb), self.exit_cum.reserve(nb)), self.exit_time.n,
            tuple(g.reserve(nb) for g in batches), self.batch_start.n,
            (self.reject_time.reserve(nb), self.reject_cum.reserve(nb)), self.reject_time.n, prev)
        for g in (self.req_start, self.req_end, self.req_rejected):
            g.n += m
        for g in (self.exit_time, self.exit_cum):
            g.n += nb
        for g in batches:
            g.n += runs
        for g in (self.reject_time, self.reject_cum):
            g.n += rejs
        self._nb = 0

    # -- what the replica's Triton /metrics would report -----------------------------------
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
