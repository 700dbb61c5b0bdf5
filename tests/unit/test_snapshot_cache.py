"""scaling/snapshot_cache.py: one Prometheus round shared between the ticks that ask for it, what a tick
gets when the round is slow, hung or failed, and the sources forgotten when no tick asks any more."""

from __future__ import annotations

import asyncio

from tritonscale.scaling.prometheus_source import Snapshot
from tritonscale.scaling.snapshot_cache import SnapshotCache


class CountingSource:
    def __init__(self) -> None:
        self.calls = 0

    def fetch(self, window_s: int) -> Snapshot:
        self.calls += 1
        import time
        time.sleep(0.05)
        return Snapshot(taken_at=clock[0], ok=True)


clock = [1000.0]


async def test_snapshot_cache_shares_one_fetch_between_concurrent_ticks():
    source = CountingSource()
    cache = SnapshotCache(lambda url: source, clock=lambda: clock[0])
    snaps = await asyncio.gather(*(cache.get("http://p", 60, max_age_s=15) for _ in range(50)))
    assert source.calls == 1 and all(s is snaps[0] for s in snaps)
    clock[0] += 10  # still fresh for a 15 s interval
    await cache.get("http://p", 60, max_age_s=15)
    assert source.calls == 1
    clock[0] += 10  # older than the interval: one new round
    await cache.get("http://p", 60, max_age_s=15)
    assert source.calls == 2
    await cache.get("http://p", 30, max_age_s=15)  # another window is another query set
    assert source.calls == 3


async def test_a_window_no_tick_asks_for_any_more_is_forgotten_while_its_url_stays():
    """auditN F6: a windowSeconds no object uses any more kept its last snapshot (every service's readings)
    for as long as the URL was in use."""
    from tritonscale.scaling import snapshot_cache as sc

    now = [0.0]
    cache = SnapshotCache(lambda url: CountingSource(), clock=lambda: now[0])
    await cache.get("http://p", 30, max_age_s=15)
    await cache.get("http://p", 60, max_age_s=15)
    assert set(cache._cache) == {("http://p", 30), ("http://p", 60)}
    for _ in range(int(sc.FORGET_AFTER_S / 15) + 2):  # only the 60 s window is asked for from now on
        now[0] += 15.0
        await cache.get("http://p", 60, max_age_s=15)
    assert set(cache._cache) == {("http://p", 60)}


async def test_a_url_no_tick_asks_for_any_more_is_forgotten_with_its_threads():
    """Each spec.scaling.prometheus.url ever set kept a source, a pool of threads and a failure series for
    as long as the operator ran: 60 edits of one object's URL left 60 more threads after it was deleted."""
    from tritonscale.scaling import snapshot_cache as sc

    made, forgotten, now = [], [], [0.0]
    cache = SnapshotCache(lambda url: made.append(url) or CountingSource(), clock=lambda: now[0],
                          on_forget=forgotten.append)
    for port in range(5):
        await cache.get(f"http://p:{port}", 60, max_age_s=15)
        now[0] += 1.0
    pools = dict(cache._executors)
    assert len(pools) == 5 and forgotten == []
    now[0] = 4.0 + sc.FORGET_AFTER_S  # p:4 was asked for at t = 4 and is still in use; the others not
    await cache.get("http://p:4", 60, max_age_s=15)
    assert forgotten == [f"http://p:{port}" for port in range(4)]
    assert set(cache._executors) == set(cache._sources) == {"http://p:4"}
    assert all(pools[f"http://p:{port}"]._shutdown for port in range(4))
    assert {url for url, _ in cache._cache} == {"http://p:4"}
    # a URL asked for again is a new source, as at first
    await cache.get("http://p:0", 60, max_age_s=15)
    assert made.count("http://p:0") == 2
    # a slow-ticking service's URL stays FORGET_TICKS of its interval
    await cache.get("http://slow", 60, max_age_s=3600)
    now[0] += sc.FORGET_AFTER_S + 1
    await cache.get("http://p:4", 60, max_age_s=15)
    assert "http://slow" in cache._sources and "http://p:0" not in cache._sources


async def test_a_cancelled_tick_does_not_cancel_the_fetch_the_others_wait_for():
    # One InferenceService deleted (its daemon cancelled) mid-fetch: the others' ticks go on.
    source = CountingSource()
    cache = SnapshotCache(lambda url: source, clock=lambda: clock[0] + 100)
    first = asyncio.create_task(cache.get("http://p", 60, max_age_s=15))
    await asyncio.sleep(0.01)
    others = [asyncio.create_task(cache.get("http://p", 60, max_age_s=15)) for _ in range(3)]
    await asyncio.sleep(0.01)
    first.cancel()
    results = await asyncio.gather(first, *others, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert all(isinstance(r, Snapshot) and r.ok for r in results[1:]), results
    assert source.calls == 1


async def test_a_fetch_that_raises_is_a_failed_snapshot_and_is_not_cached():
    calls = []

    class Broken:
        def fetch(self, window_s: int) -> Snapshot:
            calls.append(window_s)
            raise RuntimeError("boom")

    cache = SnapshotCache(lambda url: Broken(), clock=lambda: clock[0])
    snap = await cache.get("http://p", 60, max_age_s=15)
    assert not snap.ok and snap.error == "Prometheus at http://p: RuntimeError: boom"
    assert snap.observation("ns", "svc", "m").status == "failed"
    await cache.get("http://p", 60, max_age_s=15)
    assert len(calls) == 2  # the next tick tries again


async def test_a_failed_snapshot_the_source_returns_is_not_cached_either():
    calls = []

    class Down:
        def fetch(self, window_s: int) -> Snapshot:
            calls.append(window_s)
            return Snapshot(taken_at=clock[0], ok=False, error="connection refused")

    cache = SnapshotCache(lambda url: Down(), clock=lambda: clock[0])
    assert not (await cache.get("http://p", 60, max_age_s=15)).ok
    assert not (await cache.get("http://p", 60, max_age_s=15)).ok
    assert len(calls) == 2  # the second tick asked again instead of reusing the failure


async def test_a_tick_waits_about_one_interval_for_a_round_then_holds():
    """A round still running after the tick's wait is a failed snapshot for that tick (it holds and
    counts the failure); the round goes on, and its result serves the next tick."""
    import time

    class Slow:
        def fetch(self, window_s: int) -> Snapshot:
            time.sleep(1.5)
            return Snapshot(taken_at=time.time(), ok=True)

    cache = SnapshotCache(lambda url: Slow())
    first = await cache.get("http://p", 60, max_age_s=1.0)
    assert not first.ok and "no complete answer within 1 s" in first.error  # not the round's ok
    while cache._inflight:  # the round finishes in the background
        await asyncio.sleep(0.01)
    second = await cache.get("http://p", 60, max_age_s=1.0)
    assert second.ok


async def test_a_slow_prometheus_serves_its_last_round_instead_of_failing_every_other_tick():
    """Rounds of 1.3 s at a 1 s interval: the tick whose wait runs out decides on the last round (started
    within four intervals) instead of failing. Before, every other tick failed and the next succeeded on the
    round it had waited for: MetricsAvailable flapped at each tick and failureThreshold was never reached.
    A round older than that, or none, still fails the tick."""
    import time

    rounds = []

    class Slow:
        def fetch(self, window_s: int) -> Snapshot:
            started = time.time()
            time.sleep(1.3)
            rounds.append(started)
            return Snapshot(taken_at=started, ok=True)

    cache = SnapshotCache(lambda url: Slow())
    first = await cache.get("http://p", 60, max_age_s=1.0)
    assert not first.ok  # nothing to fall back on yet
    while cache._inflight:  # that round ends
        await asyncio.sleep(0.01)
    seen = []
    for _ in range(4):
        started = time.monotonic()
        snap = await cache.get("http://p", 60, max_age_s=1.0)
        seen.append(snap.ok)
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
    assert all(seen), seen
    assert len(rounds) >= 3  # new rounds kept starting: the data is at most four intervals old


async def test_rounds_longer_than_four_ticks_that_complete_fail_no_tick():
    """A Prometheus whose every round completes, but takes more than four ticks (rounds of 2.6 s at a
    0.5 s interval, under the 4 s round limit; the audit's case was 9.6 s rounds at a 3 s tick, under
    10 s): the last good round serves while the running one is within the limit. On the four-tick
    rule alone three ticks in four failed, and MetricsAvailable flapped."""
    import time

    class Slow:
        def fetch(self, window_s: int) -> Snapshot:
            started = time.time()
            time.sleep(2.6)
            return Snapshot(taken_at=started, ok=True)

    cache = SnapshotCache(lambda url: Slow(), round_limit_s=4.0)
    assert not (await cache.get("http://p", 60, max_age_s=0.45)).ok  # nothing to fall back on yet
    while cache._inflight:
        await asyncio.sleep(0.01)
    seen = []
    deadline = time.monotonic() + 7.0  # two more rounds and more
    while time.monotonic() < deadline:
        started = time.monotonic()
        seen.append((await cache.get("http://p", 60, max_age_s=0.45)).ok)
        await asyncio.sleep(max(0.0, 0.5 - (time.monotonic() - started)))
    assert len(seen) >= 6 and all(seen), seen


async def test_a_hung_prometheus_fails_once_its_last_round_is_too_old():
    """The last good round serves only while it started within SLOW_ROUND_TICKS waits: a Prometheus that
    hangs is then counted as failing (fallbackReplicas), not served stale data for ever."""
    import threading

    from tritonscale.scaling import snapshot_cache as sc

    release, now = threading.Event(), [1000.0]

    class HangsAfterOne:
        calls = 0

        def fetch(self, window_s: int) -> Snapshot:
            HangsAfterOne.calls += 1
            if HangsAfterOne.calls > 1:
                release.wait(5.0)
            return Snapshot(taken_at=now[0], ok=True)

    cache = SnapshotCache(lambda url: HangsAfterOne(), clock=lambda: now[0], round_limit_s=0.3)
    try:
        assert (await cache.get("http://p", 60, max_age_s=0.2)).ok  # the one good round, at t = 1000
        now[0] += 0.2 * (sc.SLOW_ROUND_TICKS - 1)
        assert (await cache.get("http://p", 60, max_age_s=0.2)).ok  # its round hangs: the last one serves
        now[0] += 0.2 * 2
        late = await cache.get("http://p", 60, max_age_s=0.2)  # past SLOW_ROUND_TICKS waits and the round limit
        assert not late.ok and "no complete answer within 1 s" in late.error
    finally:
        release.set()


async def test_a_hung_prometheus_keeps_one_message_while_its_rounds_keep_failing():
    """Each round of a hung Prometheus fails on the request's timeout, after the tick's wait has run out:
    the ticks report that last round's failure while the next round waits, so MetricsAvailable's message
    stays put. It alternated between the wait's "no complete answer within 1 s" and the round's own. A
    round that succeeds clears it. (Each round waits for the test to end it: no race with the clock.)"""
    import threading
    import time

    ends = [threading.Event(), threading.Event()]  # rounds 1 and 2 fail when set; round 3 answers at once
    rounds = []

    class TimesOut:
        def fetch(self, window_s: int) -> Snapshot:
            n = len(rounds)
            rounds.append(n)
            if n < len(ends):
                assert ends[n].wait(5.0)
                return Snapshot(taken_at=0.0, ok=False, error="Prometheus at http://p: no answer within 5 s")
            return Snapshot(taken_at=time.time(), ok=True)

    async def round_over() -> None:
        while cache._inflight:
            await asyncio.sleep(0.01)

    cache = SnapshotCache(lambda url: TimesOut())
    try:
        first = await cache.get("http://p", 60, max_age_s=1.0)
        assert not first.ok and "no complete answer within 1 s" in first.error  # no round has finished yet
        ends[0].set()
        await round_over()
        second = await cache.get("http://p", 60, max_age_s=1.0)  # round 2, still waiting after 1 s
        assert not second.ok and second.error == "Prometheus at http://p: no answer within 5 s"
        ends[1].set()
        await round_over()
        third = await cache.get("http://p", 60, max_age_s=1.0)  # round 3 answers
        assert third.ok and not cache._failures and rounds == [0, 1, 2]
    finally:
        for e in ends:
            e.set()


async def test_a_prometheus_that_hangs_holds_up_only_its_own_rounds():
    """One tenant's spec.scaling.prometheus.url that never answers: its rounds take its own threads,
    and every window of it in flight at once leaves another Prometheus's rounds to run at once."""
    import threading

    release = threading.Event()

    class Hung:
        def fetch(self, window_s: int) -> Snapshot:
            release.wait(5.0)
            return Snapshot(taken_at=clock[0], ok=False, error="hung")

    healthy = CountingSource()
    cache = SnapshotCache(lambda url: Hung() if "dead" in url else healthy, clock=lambda: clock[0] + 1000)
    try:
        stuck = [asyncio.create_task(cache.get("http://dead", w, max_age_s=0.2)) for w in range(11, 35)]
        await asyncio.sleep(0.05)
        snap = await cache.get("http://healthy", 60, max_age_s=1.0)
        assert snap.ok and healthy.calls == 1
        assert all(not s.ok for s in await asyncio.gather(*stuck))
    finally:
        release.set()
