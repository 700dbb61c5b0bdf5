"""The autoscaler's status fields after one decision (``autoscaler_status``): the Scaling,
MetricsAvailable and Schedulable conditions, what it saw and asked for, and its memory for a restart;
with the notes MetricsAvailable adds when Prometheus' series mislead (each pod scraped under two jobs,
pods without a rate in the window, a scrape slower than the figures were measured at)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonscale.api import status as st
from tritonscale.scaling.decider import Decision, Observation
from tritonscale.scaling.pod_census import PodCensus


def _round(v: float | None, nd: int = 1) -> float | None:
    return None if v is None else round(v, nd)


def _series_per_pod(obs: Observation, live_pods: int) -> str:
    """A note when Prometheus has at least two series of Triton's per pod: a Prometheus that scrapes
    the pods under two jobs (the chart's PodMonitor and an annotation-based job, say) makes every rate
    count twice, and the fleet twice as large, with nothing else to show for it. Several loaded
    versions of the model do the same, so it is a note, not a correction. ``live_pods`` counts the
    terminating pods too: Prometheus scrapes them until they exit (after every scale-down and rollout,
    the note read "3 series for 1 pod")."""
    if not obs.pods or live_pods < 1 or obs.pods < 2 * live_pods:
        return ""
    return (f"; {obs.pods:.0f} series of Triton's for {live_pods} pod(s): if Prometheus scrapes the pods under "
            f"more than one job, every rate counts each pod more than once (--series-label job=NAME keeps one)")


def _window_note(obs: Observation) -> str:
    """A note when some pods' series have no rate over the window (fewer than two scrapes in it): the
    rates then miss those pods' traffic, and a window shorter than two scrape intervals does it at every
    tick (only the pods whose scrape phase fits it have a rate), reading a third or half of the load
    as all of it."""
    if obs.pods is None or obs.rate_pods is None or obs.rate_pods >= obs.pods:
        return ""
    return (f"; only {obs.rate_pods:.0f} of {obs.pods:.0f} pods have two scrapes in the rate window, so the "
            "rates miss the others' traffic (a pod scraped once so far; at every tick, windowSeconds is "
            "under twice the scrape interval); scale-downs keep a replica for each")


# The scrape interval every autoscaler figure was measured at (the chart's PodMonitor and scrape config,
# the suite's simulated Prometheus). Half as long again is no jitter of it.
MEASURED_SCRAPE_S = 15.0


def _scrape_note(obs: Observation) -> str:
    """A note when Prometheus scrapes the pods less often than the figures were measured at: a burst
    shorter than a scrape shows only once it has built a queue, and each reading smooths the rate
    over a longer span, so the plan's noise margin reads low (``e2e/bench_scrape_interval.py``: at a
    30 s scrape tritonscale met fewer windows in 19 of 42 scenarios, more in 3)."""
    if obs.scrape_s is None or obs.scrape_s < 1.5 * MEASURED_SCRAPE_S:
        return ""
    return (f"; Prometheus scrapes the pods every {obs.scrape_s:.0f} s: the autoscaler was measured at "
            f"{MEASURED_SCRAPE_S:.0f} s (the chart's podMonitor.interval), and bursts shorter than a scrape "
            "go unseen until they queue")


def autoscaler_status(status: Mapping[str, Any] | None, decision: Decision, obs: Observation,
                      census: PodCensus | None, census_error: str, live_pods: int, now: float,
                      gen: int | None) -> st.InferenceServiceStatus:
    """The autoscaler's fields (``st.FIELD_OWNERS``) after one decision: what it saw, what it
    asked for and why, and its memory for a restart. ``gen``: the object's generation."""
    conds = st.set_condition(st.conditions_of(status), st.SCALING, decision.metrics_ok, decision.reason,
                             decision.message, now, gen)
    if obs.status == "failed":
        conds = st.set_condition(conds, st.METRICS_AVAILABLE, False, obs.failure, obs.message, now, gen)
    elif obs.status == "no_data":
        conds = st.set_condition(conds, st.METRICS_AVAILABLE, False, "NoData", obs.message, now, gen)
    elif obs.p95_ms is not None:
        conds = st.set_condition(conds, st.METRICS_AVAILABLE, True, "Available",
                                 f"p95 {obs.p95_ms:.1f} ms at {obs.rps:.2f} rps" + _window_note(obs)
                                 + _series_per_pod(obs, max(live_pods, census.listed if census else 0))
                                 + _scrape_note(obs),
                                 now, gen)
    elif not obs.rps:
        conds = st.set_condition(conds, st.METRICS_AVAILABLE, True, "Idle", "no requests in the rate window",
                                 now, gen)
    else:  # requests, but no p95: Triton's summary covers its own last 60 s, which may hold none of them
        conds = st.set_condition(conds, st.METRICS_AVAILABLE, True, "NoLatency",
                                 f"{obs.rps:.2f} rps, but no p95 ({obs.message or 'no latency series'}); "
                                 "scaling on the rate and the queue" + _window_note(obs) + _scrape_note(obs),
                                 now, gen)
    if census is None:
        conds = st.set_condition(conds, st.SCHEDULABLE, "Unknown", "PodsUnreadable", census_error, now, gen)
    elif census.uncreated:
        also = (f"; {census.unschedulable} pod(s) cannot be scheduled: {census.unschedulable_message}"
                if census.unschedulable else "")
        conds = st.set_condition(conds, st.SCHEDULABLE, False, "PodsNotCreated",
                                 f"the Deployment's ReplicaSet cannot create {census.uncreated} pod(s) it asks for "
                                 f"({census.uncreated_message}){also}"[:1000], now, gen)
    elif census.unschedulable:
        conds = st.set_condition(conds, st.SCHEDULABLE, False, "Unschedulable",
                                 f"{census.unschedulable} of {live_pods} pods cannot be scheduled: "
                                 f"{census.unschedulable_message}"[:1000], now, gen)
    else:
        conds = st.set_condition(conds, st.SCHEDULABLE, True, "NoUnschedulablePods",
                                 f"none of the {live_pods} pods is unschedulable", now, gen)
    new = st.InferenceServiceStatus(
        p95_milliseconds=_round(obs.p95_ms),
        requests_per_second=_round(obs.rps, 2),
        desired_replicas=decision.replicas,
        conditions=conds,
        scaling_state=decision.state.to_dict(),
    )
    if decision.state.last_scale_time is not None:
        new.last_scale_time = st.rfc3339(decision.state.last_scale_time)
    return new
