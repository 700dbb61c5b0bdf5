"""The replica against queueing closed forms, and Triton's batch-formation rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tritonscale.simulate.replica import BatcherConfig, Replica


def serve(cfg: BatcherConfig, arrivals: np.ndarray, step: float | None = None) -> Replica:
    r = Replica(0, 0.0, 0.0, cfg)
    if step is None:
        r.add(arrivals)
        r.advance(math.inf, math.inf)
    else:  # fed in segments as the engine does: must give the same batches
        t = 0.0
        while t < arrivals[-1] + step:
            lo, hi = np.searchsorted(arrivals, [t, t + step])
            r.add(arrivals[lo:hi])
            r.advance(t + step, t + step)
            t += step
        r.advance(math.inf, math.inf)
    r.sync()
    return r


def poisson(rate: float, n: int, seed: int = 0) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))


@pytest.mark.parametrize("rho", [0.5, 0.7, 0.85])
def test_unbatched_replica_is_md1(rho: float) -> None:
    # max batch 1, no delay: Poisson in, deterministic D = a + b out -- an M/D/1 queue,
    # mean wait Wq = rho * D / (2 (1 - rho)) and P(no wait) = 1 - rho.
    cfg = BatcherConfig(base_ms=8.0, per_item_ms=2.0, max_batch=1, max_queue_delay_ms=0.0, preferred=())
    d = 0.010
    t = poisson(rho / d, 400_000, seed=1)
    r = serve(cfg, t)
    wait = r.req_start.view - t
    assert wait.mean() == pytest.approx(rho * d / (2 * (1 - rho)), rel=0.04)
    assert np.mean(wait < 1e-12) == pytest.approx(1 - rho, abs=0.01)
    assert np.allclose(r.req_end.view - r.req_start.view, d)


def test_saturated_replica_serves_full_batches_at_the_analytic_maximum() -> None:
    cfg = BatcherConfig()  # 20 ms + 2 ms/item, batches of 16: 16 / 52 ms = 307.7 rps
    assert cfg.max_throughput_rps == pytest.approx(16 / 0.052)
    t = poisson(1.5 * cfg.max_throughput_rps, 60_000, seed=2)  # 150% offered load
    r = serve(cfg, t)
    ends = r.req_end.view
    horizon = t[-1]
    done = np.sum(ends <= horizon) - np.sum(ends <= 10.0)  # skip the first 10 s
    assert done / (horizon - 10.0) == pytest.approx(cfg.max_throughput_rps, rel=0.01)
    sizes = np.diff(r.batch_size_cum.view)
    assert np.mean(sizes == 16) > 0.99


def test_below_saturation_throughput_equals_offered_load() -> None:
    cfg = BatcherConfig()
    t = poisson(200.0, 40_000, seed=3)
    r = serve(cfg, t)
    assert r.served == len(t)
    assert np.all(r.latencies() > 0)
    assert np.percentile(r.latencies(), 95) < 0.15


def test_lonely_request_waits_the_queue_delay_then_runs_alone() -> None:
    r = serve(BatcherConfig(), np.array([1.0, 5.0]))
    assert r.latencies() == pytest.approx([0.002 + 0.022, 0.002 + 0.022])


def test_smallest_preferred_size_goes_without_waiting_for_the_delay() -> None:
    # four requests within 1 ms: the 4th completes preferred size 4 before the 2 ms delay
    t = np.array([1.0, 1.0002, 1.0004, 1.0006])
    r = serve(BatcherConfig(), t)
    assert r.batch_start.view.tolist() == pytest.approx([1.0006])
    assert np.diff(r.batch_size_cum.view, prepend=0).tolist() == [4]


def test_largest_preferred_size_first_while_the_delay_runs() -> None:
    # 7 arrive while a batch runs and the instance frees up before the oldest waited 2 ms:
    # Triton sends the largest preferred size (4), then the remaining 3 once their delay expires
    cfg = BatcherConfig()
    first = np.array([0.0])  # busy 0.002 .. 0.024
    late = 0.0225 + np.arange(7) * 0.0001  # 7 requests at 22.5..23.1 ms
    r = serve(cfg, np.concatenate([first, late]))
    sizes = np.diff(r.batch_size_cum.view, prepend=0).tolist()
    assert sizes == [1, 4, 3]
    assert r.batch_start.a[1] == pytest.approx(0.024)


def test_segmented_feeding_forms_the_same_batches() -> None:
    t = poisson(250.0, 20_000, seed=4)
    whole, parts = serve(BatcherConfig(), t), serve(BatcherConfig(), t, step=0.7)
    assert np.array_equal(whole.batch_start.view, parts.batch_start.view)
    assert np.array_equal(whole.req_end.view, parts.req_end.view)


@pytest.mark.parametrize("cfg", [BatcherConfig(max_queue_delay_ms=5.0, preferred=(4, 8), queue_timeout_ms=150.0),
                                 BatcherConfig(max_queue_delay_ms=0.0, preferred=(), queue_timeout_ms=150.0)])
def test_compiled_batcher_forms_the_batches_its_python_source_does(monkeypatch: pytest.MonkeyPatch,
                                                                   cfg: BatcherConfig) -> None:
    # numba compiles the batch loop; its Python source (py_func, run by the interpreter and numpy)
    # is the specification. Overload
    # with a queue timeout rejects, preferred sizes split, and the batch buffers grow (one
    # advance forms thousands of batches), fed whole and in segments with syncs in between.
    from tritonscale.simulate import replica

    t = np.concatenate([poisson(250.0, 8_000, seed=5), poisson(400.0, 8_000, seed=6) + 40.0])
    compiled = [serve(cfg, t), serve(cfg, t, step=0.3)]
    monkeypatch.setattr(replica, "_form_batches", replica._form_batches.py_func)
    python = [serve(cfg, t), serve(cfg, t, step=0.3)]
    for c, p in zip(compiled, python, strict=True):
        assert int(p.reject_cum.view[-1]) > 0 and len(p.batch_start.view) > 1000
        for field in ("batch_start", "batch_end", "req_end", "req_rejected", "reject_time"):
            assert np.array_equal(getattr(c, field).view, getattr(p, field).view), field


def test_pending_and_busy_time() -> None:
    r = serve(BatcherConfig(max_queue_delay_ms=0.0, preferred=()), np.array([0.0, 0.001, 0.002]))
    # batch 1 = [0.0] runs 0..0.022; batch 2 = the other two, 0.022..0.046
    assert r.pending_at(0.010) == 2
    assert r.pending_at(0.030) == 0
    assert r.busy_seconds(0.0, 1.0) == pytest.approx(0.046)
    assert r.busy_seconds(0.011, 0.033) == pytest.approx(0.022)


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="preferred"):
        BatcherConfig(preferred=(32,))
    with pytest.raises(ValueError, match="max batch"):
        BatcherConfig(max_batch=0)


@pytest.mark.parametrize(("a", "b", "k", "targets"), [
    (20.0, 2.0, 16, 2.0),  # the suite's model, its tight target
    (20.0, 2.0, 16, 6.0),  # ... and its loose one
    (4.0, 3.0, 16, 2.0),  # per-item cost dominates: batch sizes vary most
    (40.0, 1.0, 16, 2.0),  # fixed cost dominates
    (20.0, 5.0, 4, 3.0),  # small batches
    (12.5, 12.5, 1, 4.0),  # no batching: an M/D/1 queue
    (10.0, 0.0, 1, 2.0),  # ... at two service times (the regimes alone gave ~0: twenty replicas)
    (20.0, 2.0, 1, 3.0),
])
def test_deciders_p95_capacity_agrees_with_the_simulated_replica(a, b, k, targets):
    """The decider's p95 capacity under greedy batching (``batcher_model.greedy_p95_capacity``)
    against the rate at which the simulated replica's p95 reaches the target (Poisson arrivals, no
    queue delay): never more than a few percent above it (that would plan too few replicas), and
    not far below it (too many)."""
    from tritonscale.scaling.decider.batcher_model import greedy_p95_capacity
    from tritonscale.simulate.capacity import capacity_at_slo

    target = targets * (a + b * k)
    measured = capacity_at_slo(BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=0.0,
                                             preferred=()), target, requests=40_000).capacity_rps
    model = greedy_p95_capacity((a, b), k, target)
    assert 0.85 * measured <= model <= 1.03 * measured


@pytest.mark.parametrize(("a", "b", "k", "targets"), [
    (40.0, 1.0, 16, 1.5),  # fixed cost dominates, below two full batches: the closed form read 7 rps for 59
    (20.0, 5.0, 4, 2.5),  # small batches between the regimes: 17% low
    (20.0, 15.0, 4, 1.5),  # per-item cost dominates, below two full batches: 17% high (too few replicas)
    (5.0, 20.0, 4, 3.0),  # 14% low
])
def test_the_decider_plans_greedy_batching_within_the_sample_models_band(a, b, k, targets):
    """What the decider plans greedy batching with (``batcher_model.greedy_capacity``: the closed form
    held within [sample / SAMPLE_EXCESS, sample] of Triton's rule over the model's sample) against the
    simulated replica, at points where the closed form alone drifts far from it (asserted, so the check
    is of the band, not of the closed form): within -8% .. +5% (``e2e/bench_capacity_model.py`` prints
    all 72 points of the grid SAMPLE_EXCESS was measured on)."""
    from tritonscale.scaling.decider.batcher_model import greedy_capacity, greedy_p95_capacity
    from tritonscale.simulate.capacity import capacity_at_slo

    target = targets * (a + b * k)
    measured = capacity_at_slo(BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=0.0,
                                             preferred=()), target, requests=40_000).capacity_rps
    assert not 0.92 * measured <= greedy_p95_capacity((a, b), k, target) <= 1.05 * measured
    assert 0.92 * measured <= greedy_capacity((a, b), k, target) <= 1.05 * measured


@pytest.mark.parametrize(("a", "b", "k", "prefs"), [
    (20.0, 15.0, 4, ()), (20.0, 5.0, 4, ()), (10.0, 1.0, 32, ()), (4.0, 3.0, 16, (4, 8, 16)), (50.0, 5.0, 8, (4, 8)),
])
def test_the_decider_plans_a_long_queue_delay_no_higher_than_the_replica_serves(a, b, k, prefs):
    """What the decider plans a delay of one full-batch time with, at a target of two
    (``batcher_model.delayed_capacity``: the sample held within [sample / SAMPLE_EXCESS, sample]),
    against the simulated replica, at points where the sample alone reads 2.5-4.3% above it (asserted,
    so the check fails on the sample): at most what the replica serves, and within 6% below it."""
    from tritonscale.scaling.decider.batcher_model import capacity_at_target, delayed_capacity
    from tritonscale.simulate.capacity import capacity_at_slo

    full = a + b * k
    measured = capacity_at_slo(BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=full,
                                             preferred=prefs), 2 * full, requests=40_000).capacity_rps
    assert capacity_at_target((a, b), k, 2 * full, full, prefs, best_effort=False) > 1.02 * measured
    assert 0.94 * measured <= delayed_capacity((a, b), k, 2 * full, full, prefs) <= measured


@pytest.mark.parametrize(("delay_ms", "prefs"), [
    (0.0, ()), (2.0, (4, 8, 16)), (50.0, (2,)), (100.0, (4,)), (50.0, (4, 8)), (100.0, (4, 8, 16)),
    (200.0, (4, 8, 16)), (50.0, (8, 16)), (100.0, (8,)), (100.0, ()), (100.0, (2, 4)),
])
def test_batcher_models_p95_agrees_with_the_simulated_replica(delay_ms, prefs):
    """The decider's and the tuner's batcher model (``batcher_model.steady_state``: Triton's rule over a
    fixed sample of 2,000 Poisson arrivals) against the simulated replica over 40,000, at rates up to
    0.8 of saturation (20 + 2n ms, max batch 16): within 8% at every rate, where holds, preferred sizes
    that cut batches short and expiring delays make p95 rise and fall with the rate (the mean-value
    model before session 67 read 212 ms for [2] within 50 ms at 100 rps, where the replica measures 90)."""
    from tritonscale.scaling.decider.batcher_model import predicted_p95_ms

    cfg = BatcherConfig(base_ms=20.0, per_item_ms=2.0, max_batch=16, max_queue_delay_ms=delay_ms, preferred=prefs)
    gaps = np.random.default_rng(0).exponential(1.0, 40_000)
    for rate in (25.0, 50.0, 100.0, 150.0, 200.0, 245.0):
        measured = _run_one_p95(cfg, rate, gaps)
        assert predicted_p95_ms((20.0, 2.0), 16, delay_ms, prefs, rate) == pytest.approx(measured, rel=0.08), rate


@pytest.mark.parametrize(("a", "b", "k"), [(40.0, 1.0, 16), (4.0, 3.0, 16), (10.0, 1.0, 32), (20.0, 5.0, 4)])
def test_batcher_models_p95_agrees_with_the_simulated_replica_for_other_costs(a, b, k):
    """The same agreement for other batch costs, each with a delay of half, one, 1.5 and 2 full-batch
    times and preferred sizes of a quarter and a half of the maximum, at 0.1-0.8 of saturation: within
    12% (the largest gap, 10%, is a preferred size of k/4 that just keeps up at 0.8 of saturation, where
    the sample's 2,000 arrivals see the queue build more slowly than 40,000 do)."""
    from tritonscale.scaling.decider.batcher_model import predicted_p95_ms, saturation_rps

    full = a + b * k
    gaps = np.random.default_rng(0).exponential(1.0, 40_000)
    for delay, prefs in ((0.0, ()), (0.5 * full, (k // 4, k // 2)), (1.5 * full, (k // 4,)), (2.0 * full, ()),
                         (full, (k // 2, k))):
        cfg = BatcherConfig(base_ms=a, per_item_ms=b, max_batch=k, max_queue_delay_ms=delay, preferred=prefs)
        for share in (0.1, 0.3, 0.5, 0.7, 0.8):
            rate = share * saturation_rps((a, b), k)
            measured = _run_one_p95(cfg, rate, gaps)
            assert predicted_p95_ms((a, b), k, delay, prefs, rate) == pytest.approx(measured, rel=0.12), (delay, prefs,
                                                                                                          share)


def _run_one_p95(cfg: BatcherConfig, rate: float, gaps: np.ndarray) -> float:
    from tritonscale.simulate.capacity import _run_one

    return _run_one(cfg, rate, gaps).p95_ms


def test_small_batches_at_two_batch_times_keep_the_one_at_a_time_floor():
    """maxBatchSize 2 at a target of two full-batch times: the regimes alone left ~0 rps (every
    request charged a whole running batch); the M/D/1 floor of single requests keeps a capacity,
    below the simulated replica's (conservative: more replicas, not a missed target)."""
    from tritonscale.scaling.decider.batcher_model import greedy_p95_capacity, md1_p95_capacity
    from tritonscale.simulate.capacity import capacity_at_slo

    for a, b in ((10.0, 0.0), (20.0, 2.0), (5.0, 5.0)):
        target = 2 * (a + 2 * b)
        measured = capacity_at_slo(BatcherConfig(base_ms=a, per_item_ms=b, max_batch=2, max_queue_delay_ms=0.0,
                                                 preferred=()), target, requests=40_000).capacity_rps
        model = greedy_p95_capacity((a, b), 2, target)
        assert model == pytest.approx(md1_p95_capacity(a + b, target))
        assert 0.35 * measured <= model <= measured


def test_md1_p95_capacity_matches_erlangs_formula():
    from tritonscale.scaling.decider.batcher_model import md1_p95_capacity, md1_wait_cdf

    # two service times of sojourn: P(W <= s) = (1 - rho) e^rho = 0.95 (the simulated replica: 28.5 rps)
    rho = md1_p95_capacity(10.0, 20.0) * 10.0 / 1000.0
    assert (1 - rho) * math.exp(rho) == pytest.approx(0.95, abs=1e-6) and 0.28 < rho < 0.29
    assert md1_wait_cdf(0.02, 10.0, 10.0) == pytest.approx(0.8 * math.exp(0.2))
    assert md1_p95_capacity(10.0, 9.0) == 0.0  # the service alone misses the target
    assert md1_p95_capacity(10.0, 10.0) == pytest.approx(5.0)  # no wait allowed: P(W = 0) = 1 - rho = 0.95


def numpy_sync(self: Replica) -> None:
    """The bookkeeping ``Replica.sync`` did in numpy before it was compiled: the specification."""
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


GROWN = ("arrivals", "req_start", "req_end", "req_rejected", "exit_time", "exit_cum", "batch_start", "batch_end",
         "batch_busy_cum", "batch_size_cum", "batch_queue_cum", "reject_time", "reject_cum")


@pytest.mark.parametrize("cfg", [BatcherConfig(max_queue_delay_ms=5.0, preferred=(4, 8), queue_timeout_ms=150.0),
                                 BatcherConfig()])
@pytest.mark.parametrize("step", [None, 0.3])
def test_compiled_sync_keeps_the_books_numpy_did_to_the_bit(monkeypatch: pytest.MonkeyPatch, cfg: BatcherConfig,
                                                             step: float | None) -> None:
    # Overload (rejections with the timeout, long batches of rejected requests) and light load,
    # synced once at the end or every 0.3 s: every array equal, bit for bit, to numpy's (the
    # kernel reproduces numpy's pairwise sums, so the suite's figures did not move).
    t = np.concatenate([poisson(250.0, 8_000, seed=5), poisson(400.0, 8_000, seed=6) + 40.0])
    compiled = serve(cfg, t, step)
    monkeypatch.setattr(Replica, "sync", numpy_sync)
    reference = serve(cfg, t, step)
    assert len(reference.batch_start.view) > 1000
    assert (reference.reject_cum.n > 0) == (cfg.queue_timeout_ms is not None)
    for name in GROWN:
        assert np.array_equal(getattr(compiled, name).view, getattr(reference, name).view), name


def test_a_request_at_the_timeout_to_the_last_bit_is_served_or_rejected_never_looped():
    """A periodic trace (an arrival every 3 ms) made `simulate` run until memory ran out: the queue policy's
    test (`s - first > timeout`) and the count of what it rejects (arrivals before `s - timeout`) disagreed
    in the last bit (first 4.164, s 4.364, timeout 0.2), so a rejection of no request was recorded and the
    head never moved (an exploration, session 55). Both now use the same comparison."""
    from tritonscale.simulate.replica import _form_batches, _preferred_table

    first, s, timeout = 4.164, 4.364, 0.2
    assert s - first > timeout and not first < s - timeout  # the disagreement itself
    cfg = BatcherConfig(max_queue_delay_ms=0.0, preferred=())
    pref, pmin = _preferred_table(cfg)
    starts, sizes = np.zeros(8), np.zeros(8, dtype=np.int64)
    for form in (_form_batches, _form_batches.py_func):  # compiled, and its Python source
        head, _, nb = form(np.array([first]), 0, 1, s, 0.02, 0.002, 16, 0.0, pref, pmin, timeout, 10.0, 10.0,
                           starts, sizes, 0)
        assert head == 1 and nb == 1 and sizes[0] == 1, (head, nb, sizes)  # served: it waited timeout, no more




def test_robust_capacity_reads_past_the_rates_a_queue_delay_misses():
    """``robust_capacity_at_slo`` (what e2e/bench_capacity_model.py measures a delay against): with no delay
    p95 rises with the rate and it agrees with ``capacity_at_slo``'s bisection; with a 100 ms delay at a
    135 ms target, light traffic waits out the delay and meets it (100 + a small batch), 100 rps misses it
    (100 ms + a batch of 10), and from about 200 rps batches fill before the delay and meet it again. The
    bisection stops at the light-traffic edge; the robust figure is the heavy one, with every rate down to
    0.8 of it meeting the target, as the batcher model asks of its sample."""
    from tritonscale.simulate.capacity import _run_one, capacity_at_slo, robust_capacity_at_slo

    greedy = BatcherConfig(base_ms=20.0, per_item_ms=2.0, max_batch=16, max_queue_delay_ms=0.0, preferred=())
    assert robust_capacity_at_slo(greedy, 104.0, 0.8, requests=10_000) == pytest.approx(
        capacity_at_slo(greedy, 104.0, requests=10_000).capacity_rps, rel=0.005)
    held = BatcherConfig(base_ms=20.0, per_item_ms=2.0, max_batch=16, max_queue_delay_ms=100.0, preferred=())
    bisected = capacity_at_slo(held, 135.0, requests=10_000).capacity_rps
    robust = robust_capacity_at_slo(held, 135.0, 0.8, requests=10_000)
    assert bisected < 60.0 < 250.0 < robust
    gaps = np.random.default_rng(0).exponential(1.0, 10_000)
    assert _run_one(held, 100.0, gaps).p95_ms > 135.0
    assert all(_run_one(held, f * robust, gaps).p95_ms <= 135.0 for f in (0.8, 0.9, 1.0))
