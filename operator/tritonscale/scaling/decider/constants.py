"""The decider's constants, each with its reason (figures from the scenario suite,
``tritonscale simulate --suite``). The steps read them as ``constants.NAME`` at call time."""

# Share of a replica's capacity the rate signal plans for. With batch statistics the capacity
# is the p95 capacity (batcher_model.greedy_capacity: the queueing of random batch sizes is
# in it) divided by this share, no more than saturation -- the plan lands on the p95 capacity and
# never above this share of saturation, where rate noise within a tick would build a queue; from
# p95 alone (no batch statistics) the share covers the estimate's error. Growth is planned for
# separately (forecast) and bursts by the burst memory. Suite, seed-0 matrix (7 classes x 3 cold
# starts x 2 SLOs): 0.93 and 0.95 met the criteria in fewer scenarios than 0.9 with the
# mean-value capacity rule this replaced; re-checked with the p95 capacity: 0.9 and 0.93 both
# 32/42 (0.93 a little cheaper, median 1.20x against 1.21x the oracle, but the random walk at
# 60 s, loose, fell to 88.3% of windows), 0.95 31/42. The share of saturation is now the
# rate's (rate_model.saturation_share): up to the p95 capacity for a rate that holds still over a
# horizon, this share for one that moves -- whole suite and held-out seeds 3-4 (210 scenarios,
# fixed-share baseline 163): 167, the loose target's diurnal and bursts no longer costlier than
# Triton's queue HPA or KPA; a fixed 0.93 or 0.95 gave 160 and 156 (the Azure trace and long
# cold starts lost windows).
UTILISATION = 0.9
# Before the first pod was seen starting, assume this cold start (s): the sandbox's
# CPU model starts in ~2 s, a GPU model with a large image in minutes.
DEFAULT_COLD_START_S = 60.0
# The rate history kept for level, trend, noise and surprises: one sample per tick (a tick within
# half an interval of the last, out of turn, replaces its sample), as far back as the longest of them
# looks (NOISE_S, or RISE_HORIZONS + 1 horizons for long cold starts: 43 samples at 15 s ticks and a
# 60 s cold start, 99 at 180 s; 151 at the sandbox's 2 s ticks). It once kept one per 10 s by
# replacing the latest sample while it was younger than that, so ticks under 10 s kept one sample in
# all and measured no noise, trend or rise; thinned to one per 10 s instead, the sandbox's short
# history read its two load steps as noise (20-30 rps on a 10 rps phase).
# Trend: fitted over the last two minutes at least (longer for longer cold starts).
TREND_S = 120.0
TREND_HORIZON_SHARE = 1.0
# ... but extrapolated at most this far ahead: over three minutes a wandering rate turns as
# often as it goes on (suite, cold start 180 s, seeds 0-1: 11/28 scenarios meet the criteria
# extrapolating a whole horizon, 14 with no trend at all, 15 with 90 or 120 s; measured with the
# decider of 2026-11-22). Only cold starts above ~100 s reach the cap. Re-measured in session 39,
# re-runs of tritonscale against the stored suites, 140 s against 120 s: seeds 0-2 100 -> 102/126
# (missed windows 296 -> 291, +0.18% replica-hours: diurnal at 180 s meets every window in two
# more seeds), held-out seeds 3-4 60 -> 60 (203 -> 197, +0.13%), 5-6 59 -> 60 (230 -> 226, +0.11%).
# On top of a share change tried that session (since reverted): 140 s 101 -> 103, 60 -> 60,
# 60 -> 61 and the wide ranges 82 -> 83/108; 160 s 102, 60, 61; 200 s 100 and 300 s (the whole
# horizon) 99, random walks at 180 s then peaking at 13-14 against limits of 12-13. A smooth rise
# goes on for longer than a wander does; the cap sits where the random walk's turns start to cost
# more than the diurnal's climb gains. (Session 33 rejected 160 s: with its decider it gained on
# seeds 0-2 only.)
TREND_MAX_HORIZON_S = 140.0
# ... and only as far as the rate has delivered its trends: the extrapolated rise is scaled by the
# share of the rises planned at the history's earlier ticks that came one horizon later
# (rate_model.trend_delivery: each tick's realized rise counted from none up to the rise it planned).
# A ramp goes on and delivers its trend whole; a random walk's excursion or the real trace's surge
# stops or turns, and its trend buys replicas that are still there at the top. The rate history
# bounds the evidence (RISE_HORIZONS + 1 horizons). With no tick that planned a rise that can be
# checked, the trend is extrapolated whole: the first ramp out of a flat lead-in is met as before.
# The share counts TREND_EVIDENCE more ticks that delivered the mean rise planned whole (session 100;
# until then the trend was trusted whole below TREND_EVIDENCE ticks and at the raw share from
# there on, so three ticks at a ramp's top, each followed by the fall, read 0 and took the trend and
# steps.climbing's hold from the next ramp's start, `ramps/cold60s/loose/seed1` at 2,685 s). Three,
# as for horizon_rise's differences: fewer say little of a share. Re-runs against the stored suites
# (`e2e/bench_suite_rerun.py`, session 100): seeds 0-2 99 -> 99/126, missed windows 296 -> 291,
# +0.10% replica-hours; held-out seeds 5-7 87 -> 87, 332 -> 332, +0.05%; with 2 in its place 99
# (293 missed), with 5 97 (random walks at 60 and 180 s, tight, seed 1, peak 11 against 10). The
# batching tuner's evaluation (`e2e/bench_batching_tuner.py`): seeds 0-1 49 -> 50/56, held-out
# seeds 3-4 48 -> 50/56. Session 66's figures for the share itself (trusted whole below three ticks
# then), re-runs of tritonscale against the stored suites (`e2e/bench_suite_rerun.py`): seeds 0-2
# 104 -> 106/126 (random walks at 60 and 180 s, tight, seed 1, within their peak limits: 11 -> 10),
# held-out seeds 3-4 64 -> 64/84, 5-6 59 -> 61, 7-8 62 -> 62, the wide ranges 93 -> 94/126, the
# real-trace variants 7 -> 6/24; replica-hours -0.3% to -0.8% in every set, missed windows
# +6 to +13 per set (282 -> 295 on seeds 0-2), mostly random walks. Other replica models (seed 0):
# no batching 28 -> 29/42 (seeds 1-2: 45 -> 51/84), per-item heavy 31 -> 31, peaks of 3 and 16
# replicas 29 -> 29 and 32 -> 31. The batching tuner's suite: seeds 0-1 45 -> 42/56, 3-4 47 -> 47.
# steps.climbing scales its climb by the same share; left whole, the tuner's seeds 0-1 gave 44/56,
# but the suite's static peak fleet dominated three more ramps at 180 s.
TREND_EVIDENCE = 3
# Rate noise: the rate's tick-to-tick variability (robust: median absolute difference of
# consecutive samples over the last five minutes, as a standard deviation) is planned for at
# the one-sided 95% normal quantile -- the objective is a p95. Poisson traffic at hundreds of
# rps has ~1% noise per tick; the shared Azure trace's 10 s bursts show as ~10%. Suite,
# seed-0 matrix: z = 1.0 met the criteria in fewer scenarios. Whole suite, seeds 0-2 (session 88,
# e2e/bench_suite_rerun.py --set NOISE_Z=...): 1.28 99 -> 97/126 (-0.8% replica-hours where it moved),
# 2.0 99 -> 99 (+1.0%).
NOISE_S = 300.0
NOISE_Z = 1.645
# ... once there are enough differences for the median absolute deviation to ignore NOISE_SHIFTS
# level shifts (a service's first load and one step). A reading is the sum of the pods' ``irate``,
# each over the scrape interval before its pod's last scrape (at its own phase), so it blends the
# last two intervals and a shift shows in SHIFT_READINGS consecutive readings: it moves
# lag + SHIFT_READINGS - 1 consecutive lag-``lag`` differences, and the MAD holds while fewer than
# half of them moved -- more than 2 x NOISE_SHIFTS x (lag + SHIFT_READINGS - 1): 9 differences at
# lag 1, 13 at lag 2. Counting one reading per shift (5 and 9; session 34), the sandbox's step
# (15 -> 70 rps at 2 s ticks, the start and the step each read over two ticks) could read 10 rps
# of noise on the 70 (Poisson: 5.9) and plan a fourth replica: its test peaked at 4 in one run of
# eight (session 41); with three differences, 11.5 rps. Until then the plan carries no noise
# margin and asks for no fewer replicas (steps.measure). At the suite's 15 s ticks this binds in the
# first 135 s: within the synthetic classes' 300 s lead-in, but in the scored first minutes of the
# trace class, which has none. Re-runs against the stored suites (session 42): counting two readings
# alone, seeds 0-2 102 -> 99/126 (the trace at 15 s, tight, scaled down in its third minute with no
# margin and lost a window in each seed); with steps.measure, 102 -> 102 (13 scenarios change,
# each cheaper), held-out seeds 3-4 60 -> 60, 5-6 60 -> 59 (trace/cold180s/loose/seed5 loses its
# minute 19 again, as in sessions 34 and 39), the real-trace variants 9 -> 9 of 24.
NOISE_SHIFTS = 2
SHIFT_READINGS = 2
# The level the plan starts from: the mean over the policy's rate window (spec.scaling.windowSeconds,
# 60 s by default), or the latest sample if higher. Sudden falls compare with the minute before
# (LEVEL_S); surprises with the plans of one rate window (signals.surprise: LEVEL_S at the CRD's
# default window, where every suite figure was measured; the sandbox's 10 s window, 10 s).
LEVEL_S = 60.0
# Surprises: the rate exceeded, by more than its noise, what the replicas planned a cold start
# ago serve at the target (whole replicas: signals.bought) -- a rise the plan did not foresee. A
# reactive scaler pays a whole cold start of misses for each one. (Against the bare plan, steady
# Poisson traffic crossed the noise test about once an hour; whole suite, seeds 0-2: 97 -> 99/126
# with what the replicas serve, cheaper; held-out seeds 3-4: 65 -> 64/84, cheaper in 27 of 28.)
# Once surprises recur (SURPRISES_FOR_MEMORY: a single one may be a one-off flash crowd, and
# holding capacity after it would only cost), the peak need is held (burst memory)
# for SURPRISE_HOLD_COLD_STARTS cold starts, so surprises cost at most ~1/10 of the time -- the
# budget of a 90% window objective -- and at least twice the longest gap seen between them
# (the next gap may be longer than the few seen), at most MAX_BURST_HOLD_S. Suite, seed-0
# matrix: memory after the first surprise met the criteria in 31/42 scenarios, after the
# second 33/42 (flash crowds then cost more than Triton's queue HPA at equal attainment).
SURPRISE_HOLD_COLD_STARTS = 10.0
# Suite, seeds 0-2 (session 32 re-runs): 1.5 and 3.0 gaps both 99 -> 99/126 (-0.5% and +1.6%
# of the changed scenarios' replica-hours).
BURST_HOLD_GAPS = 2.0
# Surprises recur when they come within MAX_BURST_HOLD_S of each other, and the hold runs from
# the last of them (signals.recurring). Until session 61 each was forgotten MAX_BURST_HOLD_S after
# its own time, which ended the memory when the first aged out, however recent the second.
# Re-runs against stored suites: seeds 0-2 101 -> 101/126, 3-4 60 -> 60, 5-6 60 -> 60, 7-8
# 57 -> 59 (steps at 60 s, seed 7, 88.3% -> 91.7% of windows), wide ranges 83 -> 83/108; flash
# crowds with two crowds cost up to 30% more, held after the second crowd, at the same windows.
MAX_BURST_HOLD_S = 1800.0
MAX_SURPRISES = 8
SURPRISES_FOR_MEMORY = 2
# ... unless one surprise already spends the budget: each costs about one horizon (cold start +
# tick) of missed windows, and SURPRISE_BUDGET of MAX_BURST_HOLD_S is the 90% objective's share,
# so with cold starts over ~75 s the memory engages at the first (burst_memory.surprises_for_memory). Suite, cold
# start 180 s, 7 classes x 2 SLOs x seeds 0-4: 31/70 scenarios met the criteria after the
# second surprise, 37/70 with this rule (steps 3 -> 7 of 10, flash crowds 6 -> 8, random walk
# 2 -> 3; the Azure trace 4 -> 3: held peaks cost 2% more in one seed). Cold starts up to 75 s
# are unchanged.
# Once the surprises remembered have spent it, the memory holds MAX_BURST_HOLD_S, not ten cold
# starts or 2 x the longest gap seen (burst_memory.burst_hold): onoff/cold60s/tight/seed6's first
# surprises came 225 and 270 s apart, the memory held 600 s, and the next burst came 740 s after
# the last. Re-runs against stored suites (session 75):
# seeds 0-2 106 -> 106/126 (+0.3% replica-hours), held-out 3-4 64 -> 64/84 (+0.04%), 5-6
# 62 -> 64/84 (on/off at 60 s, seed 6, tight and loose: 86.7% -> 91.7% of windows), 7-8
# 62 -> 62/84; wide ranges 95 -> 95/126 (+0.5%: random walks at 60 s hold their peak longer).
SURPRISE_BUDGET = 0.1
# Where one surprise engages the memory, so does a sudden fall while it holds nothing
# (burst_memory.sudden_fall: below every reading of the minute before by more than the noise, and by a
# replica's planned capacity below the highest): a jump down shows jumps as large, and the memory
# then keeps the need from before it. Re-runs against stored baselines: suite seeds 0-2 95 -> 99/126
# (steps at 180 s 4 -> 6 of 6, random walk at 180 s 1 -> 3), +0.4% replica-hours; held-out
# seeds 3-4 59 -> 59/84 (+0.6%), 5-6 61 -> 61/84 (+0.01%): no verdict changed there.
# The rate's rise over one horizon (rate_model.horizon_rise) is trusted -- and a steady rate
# allowed to run replicas up to the p95 capacity (saturation_share) -- only from a history of
# at least this many horizons: differences a few seconds apart overlap, so a history of one
# or two horizons holds one or two independent rises, too few for a 95% quantile (a 5-minute
# lead-in at a 180 s cold start looked steady). The rate history is kept one horizon longer.
# Six, since session 63: the quantile is read as median + 1.645 x the MAD's standard deviation,
# and from k independent normal rises that estimate is low and noisy. Drawn 400,000 times (numpy):
# at k = 3 it averages 1.11 sd above the median (the true 95% quantile is 1.645) with a spread of
# 1.13 sd, and reads below median + 1 sd half the time; at k = 6, 1.38 and 0.80 sd, a third of the
# time (asymptotically the error is sqrt(pi/2 + 1.645^2 x 1.36) = 2.3 sd / sqrt(k), under 1 sd from
# k = 6). So three horizons of a steady lead-in passed for a rate that never moves. Six, not ten or
# twenty, is a judgment on the figures below. Re-runs against the stored suites (session 62's decider,
# 3 before): seeds 0-2 103 -> 103/126 (windows missed 288 -> 286, replica-hours -0.02%), held-out
# seeds 3-4 63 -> 64/84, 5-6 58 -> 58, 7-8 61 -> 62 (248 -> 243), the wide ranges 81 -> 81/108
# (371 -> 372), the real-trace variants 7 -> 7/24 (no row moved: its bursts keep the share at
# UTILISATION). Only the loose target moves: at the tight one the p95 capacity is below
# UTILISATION of saturation. With 10: 104, 64, 58, 61, 80; with 20: 103/126 on seeds 0-2.
# (Session 27, 3 against none: seeds 0-2 92 -> 93/126 alone, 93 -> 94 with the cold start
# learned from the running pods.)
RISE_HORIZONS = 6.0
# Draining a backlog asks for at most this share more than the planned rate: round-robin gives
# new replicas only new requests, so extra replicas drain the old queues only by taking new
# traffic off them (drain rate = saturation - rate/replicas), which gains little beyond a quarter
# more replicas; the queue timeout (2 x target by default) bounds a backlog anyway. A bound
# for the worst case only: the backlog is spread over a horizon, and in the suite (seeds 0-2,
# session 32) 0.1 and 0.5 changed no scenario's figures.
BACKLOG_MAX_EXTRA = 0.25
# Queue evidence for a breach: a queue of at least this many target-times of work per
# ready replica, or on the most-queued one (pending_max: gRPC clients routed by connection leave the
# queue on a few pods), means the replicas really are behind (the p95 summary lags by a minute).
# Suite, seeds 0-2 (session 32 re-runs): 0.5 and 2.0 both 99 -> 99/126, replica-hours within 0.01.
QUEUE_PRESSURE_TARGETS = 1.0
# A drain for ``steps.settle``: at least this share of the queue gone since the last reading. The
# sandbox's step (three replicas, two just joined) drained 30 -> 11 -> 2 and 27 -> 9 (63-82% a
# tick), and its readings then ran 20-25 rps above the 70 offered. A busy fleet's queue of forming
# batches wobbles by a few percent (the batching tuner's suite: 31-37 queued on seven replicas,
# -0.1 to -0.9 per second at 15 s ticks), and settle held scale-ups on such ticks when any fall
# counted: randomwalk/cold60s/tight/seed1 lost a window from both poor starts (that suite, seeds
# 0-1: 43/56 pairs, 45 without settle, 45 with this share; session 38). Half: most of the queue.
# Re-runs against the stored suites (with capacity's session-38 change): seeds 0-2 100 -> 100/126;
# held-out 3-4 60 -> 60, 5-6 61 -> 59 (onoff/cold15s/tight/seed6 peaks at 11 again: settle had held
# it on a fall of 50 -> 29 queued; ramps/cold60s/tight/seed5, see capacity).
SETTLE_DRAINED_SHARE = 0.5
# p95 learning, only without batch statistics (see _learn_p95_capacity).
CAPACITY_EXPONENT = 0.5
MAX_EXTRAPOLATION = 2.0
CAPACITY_ALPHA = 0.3
BREACH_CEILING_RELAX = 1.01
MIN_LEARNING_RPS = 0.5
# Batch-cost model: one (batch size, batch ms) sample per batch-size bin, so what was seen
# at large batches during a burst is still known after an hour of steady traffic at small
# ones; bins are 1 wide up to 16, then 1/16 of the size (<= ~64 bins). Triton's per-request
# compute time weights each batch by its size, so a tick whose batch sizes vary (a load
# change) reads high, never low: each bin keeps its lowest time (the lower envelope), and
# forgets it after BATCH_SAMPLE_TTL_S so a slower model is learned again.
MAX_BATCH_BINS = 64
BATCH_SAMPLE_TTL_S = 1800.0
# A tick whose mean batch size moved more than this from the last one mixes small and large
# batches (a load change): its request-weighted time is biased high, so it is not a sample.
# Each bin keeps its lowest time, so a sample biased high is overwritten by the next steadier
# one in its bin; a tighter filter only throws away ticks. Re-runs of tritonscale against the
# stored baselines (session 32): 0.4 against 0.2 gave seeds 0-2 99 -> 100/126, held-out seeds
# 3-4 59 -> 60/84, 5-6 61 -> 61/84 and the wide ranges 81 -> 81/108, each a little cheaper
# (-0.2%, -0.2%, -0.2%, -0.04% of the changed scenarios' replica-hours); 0.1 gave 99 -> 97.
BATCH_STEADY_CHANGE = 0.4
# The shortest batch time that is a measurement: Triton's duration counters count microseconds
# (nv_inference_compute_infer_duration_us), so a mean below one is none -- and a batch cost of 0 made
# the capacity divide by zero.
MIN_BATCH_MS = 0.001
# Scale-down window without a spec value: this many plan horizons (learned cold start + one
# tick; steps.scale_down_window): what a removed replica takes to come back. Re-runs against
# stored baselines, one cold start before: suite (seeds 0-2) 94 -> 95/126, held-out seeds 3-4
# 57 -> 59/84 and 5-6 58 -> 59/84, replica-hours +0.4-0.6%. 1.5 cold starts instead, a figure
# with no reason behind it: 94 -> 95, 57 -> 58, 58 -> 58, +1.1%.
SCALE_DOWN_HORIZONS = 1.0
# Batch sizes this far apart give the cost's slope (capacity.capacity); one batch size of at
# least SINGLE_BATCH_MIN_SHARE of the maximum gives a guess. Suite, seeds 0-2 (session 32
# re-runs): a spread of 0.5 or 2.0, 99 -> 99/126 (+0.4% of the changed scenarios' replica-hours);
# a share of 0.125, 99 -> 96 (the trace at 15 s, loose, loses a window in each seed), 0.5 99 -> 99.
MIN_BATCH_SPREAD = 1.0
SINGLE_BATCH_MIN_SHARE = 0.25
# A model that does not batch (capacity.learn_queueing): a tick's p95 wait counts against the M/D/1
# model's only where the model waits at least this many service times -- below it p95 is the
# service time and noise. Suite, no batching (--max-batch 1), seeds 1-2 (84 scenarios; chosen on
# seed 0): 0.1, 0.25 and 0.5 each met the criteria in 44 (14 with the M/D/1 model alone).
QUEUEING_MIN_WAIT_SERVICES = 0.25
# Triton's p95 summary (nv_inference_request_summary_us) is over a sliding 60 s (the histogram
# fallback's over the rate window): a p95 over the target read within it of replicas joining holds the
# backlog of the fleet before them, and is no measurement of the queueing (capacity._drained_backlog).
# Triton's own figure, not a fitted one. Re-runs of tritonscale against stored suites with no batching
# (--max-batch 1; session 65): seed 0 25 -> 28/42, no scenario costlier (flash/cold180s/tight/seed0
# 5.06 -> 3.63 replica-hours, peak 9 -> 5 against the oracle's 4); seeds 1-2 45 -> 45/84, no figure
# moved. Batching models do not read it.
P95_SUMMARY_S = 60.0
# Room for NOISE_S of measurements at 2 s ticks, with margin (the sandbox ticks every 2 s).
MAX_QUEUEING_SAMPLES = 200
# No scale-down while the rate climbs out of the scale-down window's lowest reading by more than its
# noise (steps.climbing: this many standard deviations of the difference of two readings, sigma x
# sqrt(2); the one-sided 95% quantile, as the decider's other noise tests; 0 turns it off). A rate
# that turns up out of a fall -- a sawtooth's trough, a random walk's -- shows in the readings a
# minute or two before the trend sees it, since the trend's span still holds the fall, and a replica
# removed meanwhile is wanted back a horizon later. Re-runs against stored suites (session 62, the
# ramps class without its old trough jumps): seeds 0-2 99 -> 103/126 (missed windows 300 -> 288,
# replica-hours +0.39%), held-out seeds 3-4 61 -> 63, 5-6 58 -> 58, 7-8 60 -> 61, wide ranges
# 82 -> 81/108 (missed windows 376 -> 371). The real trace at 180 s, loose, meets every window in
# six more seeds of 0-8. The real-trace variants (e2e/trace_variants.py) 7 -> 7 of 24. With 1.0
# instead: 103, 63, 59, 60, 82, and 6 of 24, 0.2% more replica-hours.
# The hold ends once the plan reaches where the climb leads (session 64: the latest reading plus the
# climb's pace since the low over the horizon, capped at TREND_MAX_HORIZON_S as the trend is); it had
# lasted as long as the rate stood above the window's low, and after a sawtooth's instant drop the top
# fleet was kept through a ten-minute climb (ramps/cold180s/loose/seed0: 10 replicas where 6-8 served).
# Re-runs against stored suites, session 63's decider before: seeds 0-2 103 -> 104/126 (the same 286
# missed windows, replica-hours -0.24%), held-out seeds 3-4 64 -> 64 (198 -> 197), 5-6 58 -> 58, 7-8
# 62 -> 62 (-0.06% to -0.08%), wide ranges 93 -> 94/126 (-0.34%), real-trace variants 7 -> 7 of 24.
# Ending it as soon as the trend read any rise gave the same on seeds 0-2, but a jump's first reading
# passed for a climb: onoff/cold60s/*/seed6 then peaked at 11 (limit 10).
CLIMB_NOISES = NOISE_Z
