"""Share one round of Prometheus queries between every per-object tick.

Each InferenceService has its own Kopf daemon ticking at its own
``intervalSeconds``; the queries, however, cover every object at once. The
first tick that finds the cached snapshot older than its interval fetches a
new one; concurrent ticks await that same fetch (single flight), and later
ones reuse it. With 1,000 objects at 15 s this is one round of queries (one per ``promql_queries.SIGNALS``) per 15 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tritonscale.scaling.prometheus_http import redacted, shown_url
from tritonscale.scaling.prometheus_source import ROUND_TIMEOUT_S, MetricSource, Snapshot

SourceFactory = Callable[[str], MetricSource]
# Rounds in flight at once per Prometheus URL, one per window: each URL has threads of its own, so a
# Prometheus that hangs (one tenant's spec.scaling.prometheus.url) holds only its own rounds up -- with
# one pool for all, 24 services on a dead one starved a healthy one's rounds and its fleet fell back.
FETCH_THREADS = 4
# A tick waits at least this long (s) for a round, however short its interval.
MIN_WAIT_S = 1.0
# A tick whose round is still running after its wait decides on the last good round (the decider reads
# how old the data is: ``data_age``) in either of two cases; otherwise, or with no good round, the tick
# fails (holds, and counts towards failureThreshold). A Prometheus that refuses or errs fails at once.
# - The last good round started within this many times ``max_age_s`` (0.9 of the interval). That round
#   is as old as a round takes plus up to two ticks: four serve rounds of up to about two intervals.
# - The last round to finish was good and the one running is within the source's round limit
#   (``round_limit_s``, PrometheusSource's ROUND_TIMEOUT_S), by which it ends, good or failed. This is a
#   slow Prometheus whose every round completes. At a short interval (3 s) rounds of 9.6 s failed three
#   ticks in four on the first rule alone, and MetricsAvailable flapped; a hung one fails once its round
#   is cut off at the limit.
SLOW_ROUND_TICKS = 4
# A URL no tick asked for in this long (s), and in FORGET_TICKS of the longest interval that asked for
# it, is forgotten: its source, threads and cached rounds go (each spec.scaling.prometheus.url ever
# set kept a pool of threads and a metric series for as long as the operator ran).
FORGET_AFTER_S = 600.0
FORGET_TICKS = 4


class SnapshotCache:
    def __init__(self, factory: SourceFactory, clock: Callable[[], float] = time.time,
                 on_forget: Callable[[str], None] | None = None, round_limit_s: float = ROUND_TIMEOUT_S) -> None:
        self._factory = factory
        self._clock = clock
        self._round_limit_s = round_limit_s
        self._on_forget = on_forget or (lambda url: None)
        self._sources: dict[str, MetricSource] = {}
        self._cache: dict[tuple[str, int], Snapshot] = {}
        # the round in flight per (url, window), and when it started
        self._inflight: dict[tuple[str, int], tuple[asyncio.Task[Snapshot], float]] = {}
        # The last finished round's error, per (url, window), until a round succeeds: what a tick whose
        # wait runs out reports while the next round is still waiting (see get).
        self._failures: dict[tuple[str, int], str] = {}
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._asked: dict[str, tuple[float, float]] = {}  # url -> (last asked at, longest max_age_s asked with)
        # (url, window) -> last asked at: a window no object uses any more (a windowSeconds edited) kept its
        # last snapshot, every service's readings (~3.8 MiB at 1,000), while the URL stayed in use (auditN F6)
        self._windows_asked: dict[tuple[str, int], float] = {}

    def urls(self) -> set[str]:
        """The URLs ticks ask for (not yet forgotten)."""
        return set(self._asked)

    def _forget_unused(self, now: float) -> None:
        """Drop what belongs to URLs no tick asks for any more (a URL whose round is in flight stays)."""
        busy = {url for url, _ in self._inflight}
        for url, (at, age) in list(self._asked.items()):
            if url in busy or now - at <= max(FORGET_AFTER_S, FORGET_TICKS * age):
                continue
            del self._asked[url]
            self._sources.pop(url, None)
            executor = self._executors.pop(url, None)
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            for key in [k for k in self._cache if k[0] == url]:
                del self._cache[key]
            for key in [k for k in self._failures if k[0] == url]:
                del self._failures[key]
            self._on_forget(url)
        for key, at in list(self._windows_asked.items()):
            age = self._asked.get(key[0], (at, 0.0))[1]
            if key in self._inflight or now - at <= max(FORGET_AFTER_S, FORGET_TICKS * age):
                continue
            del self._windows_asked[key]
            self._cache.pop(key, None)
            self._failures.pop(key, None)

    async def get(self, url: str, window_s: int, max_age_s: float) -> Snapshot:
        """The snapshot for ``url`` and ``window_s``: the cached one if younger than ``max_age_s``,
        else the round in flight or a new one -- waited on for at most ``max_age_s`` (about one
        tick). A round still running then serves the last good round if that started within
        ``SLOW_ROUND_TICKS`` x ``max_age_s``, or if the last round to finish was good and the running
        one is within the round limit; else a failed snapshot for this tick (it holds and counts the
        failure). The round goes on for the next."""
        now = self._clock()
        self._forget_unused(now)
        self._asked[url] = (now, max(max_age_s, self._asked.get(url, (now, 0.0))[1]))
        key = (url, window_s)
        self._windows_asked[key] = now
        cached = self._cache.get(key)
        if cached is not None and now - cached.taken_at < max_age_s:
            return cached
        if key not in self._inflight:
            self._inflight[key] = (asyncio.get_running_loop().create_task(
                self._fetch(key, url, window_s), name=f"Prometheus queries {shown_url(url)} {window_s}s"), now)
        task, round_started = self._inflight[key]
        # The fetch is a task of its own, not the first caller's: a caller cancelled while it waits
        # (its InferenceService deleted, its daemon stopped) must not cancel the others' fetch.
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout=max(max_age_s, MIN_WAIT_S))
        except asyncio.TimeoutError:  # the builtin TimeoutError from 3.11; its own class on 3.10
            waited = self._clock()
            if cached is not None and (
                    waited - cached.taken_at < SLOW_ROUND_TICKS * max_age_s
                    or (key not in self._failures
                        and waited - round_started < self._round_limit_s)):
                # A slow Prometheus, not a dead one: its rounds take longer than a tick, and the last
                # one is still recent, or every round so far completed. Failing this tick made every
                # other tick fail and the next succeed on the round it had waited for --
                # MetricsAvailable flapping each tick.
                return cached
            # While a hung Prometheus's rounds keep failing, the message stays that of the last round to
            # finish ("no answer within 5 s", the request's timeout) while the next one waits. Each tick
            # alternated between it and this wait's own, so MetricsAvailable's message changed each tick.
            error = self._failures.get(key) or (f"Prometheus at {shown_url(url)}: no complete answer within "
                                                f"{max(max_age_s, MIN_WAIT_S):g} s")
            return Snapshot(taken_at=self._clock(), ok=False, error=error)

    async def _fetch(self, key: tuple[str, int], url: str, window_s: int) -> Snapshot:
        """Never raises: a task that ends in an exception nobody awaits any more is re-raised by
        Kopf when the operator stops. A failure is a failed snapshot, which the tick handles
        (hold, count it towards fallbackReplicas) and which is not cached -- nor is a failed snapshot
        the source returns: each tick that finds no fresh good snapshot asks again (concurrent ones
        still share one round), so one blip is not counted against every object's failureThreshold."""
        try:
            source = self._sources.get(url)
            if source is None:
                source = self._sources[url] = self._factory(url)
            # Their own threads: a round stuck on a slow Prometheus must not take the default
            # executor's, which every object's tick runs in (handlers.autoscale_daemon).
            executor = self._executors.get(url)
            if executor is None:  # threads start as rounds need them, up to FETCH_THREADS
                executor = self._executors[url] = ThreadPoolExecutor(max_workers=FETCH_THREADS,
                                                                     thread_name_prefix="prometheus")
            snap = await asyncio.get_running_loop().run_in_executor(executor, source.fetch, window_s)
        except Exception as exc:  # noqa: BLE001
            snap = Snapshot(taken_at=self._clock(), ok=False,
                            error=f"Prometheus at {shown_url(url)}: {type(exc).__name__}: {redacted(str(exc), url)}")
        finally:
            del self._inflight[key]
        if snap.ok:  # a failed round (Prometheus down, a query refused) is tried again by the next tick
            self._cache[key] = snap
            self._failures.pop(key, None)
        elif snap.error:
            self._failures[key] = snap.error
        return snap
