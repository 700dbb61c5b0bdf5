"""The operator's own Prometheus metrics (served on --metrics-port)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LABELS = ("namespace", "inferenceservice")

DECISIONS = Counter(
    "tritonscale_decisions", "Autoscaler decisions, by direction and reason",
    (*_LABELS, "direction", "reason"),
)
OBSERVED_P95 = Gauge("tritonscale_observed_p95_milliseconds", "p95 latency the autoscaler saw", _LABELS)
TARGET_P95 = Gauge("tritonscale_target_p95_milliseconds", "p95 latency target", _LABELS)
# target x (1 + spec.scaling.tolerance): above it the autoscaler counts a breach (a p95 up to it is none),
# what the alerts compare the observed p95 with -- against the bare target, a fleet steady at 105% of it
# alerted while the autoscaler rightly held.
BREACH_P95 = Gauge("tritonscale_breach_p95_milliseconds",
                   "p95 above which the autoscaler counts a breach: target x (1 + tolerance)", _LABELS)
DESIRED = Gauge("tritonscale_desired_replicas", "Replicas the autoscaler asked for", _LABELS)
READY = Gauge("tritonscale_ready_replicas", "Warm replicas of the Deployment", _LABELS)
# The spec's bounds, beside the counts, so an alert can compare them (charts/tritonscale/files/prometheus-rules.yaml:
# the warm floor not ready, the fleet at its ceiling while the target is missed).
FLOOR = Gauge("tritonscale_warm_floor_replicas",
              "Replicas never scaled below: minReplicas + warmBuffer, at most maxReplicas", _LABELS)
MAX_REPLICAS = Gauge("tritonscale_max_replicas", "spec.scaling.maxReplicas", _LABELS)
# Up to the longest wait a tick may have for a Prometheus round (0.9 x intervalSeconds, at most 600 s):
# ending at 5 s, every slow tick fell in +Inf, and the dashboard's quantile read 5 s.
TICK_SECONDS = Histogram(
    "tritonscale_tick_duration_seconds", "Wall time of one autoscaler tick",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300, 600),
)
METRIC_FAILURES = Counter("tritonscale_metric_source_failures",
                          "Autoscaler ticks whose Prometheus snapshot failed (one per InferenceService and tick)",
                          ("url",))


# 1 when the last round of every InferenceService that queries a Prometheus URL answered, 0 when one
# failed (by URL as shown: credentials as ***; "" for no URL at all): what an alert on a failing source
# reads -- a rate of the failures stayed above 0 for its whole range after one failure, and read
# "failing" minutes after the source was back.
METRIC_SOURCE_UP = Gauge("tritonscale_metric_source_up",
                         "1 if the last Prometheus query round of every InferenceService using this URL "
                         "answered, else 0", ("url",))
# An upgrade's progress: fleets still to roll to the new pod template (reconcile.upgrade_rollouts)
UPGRADE_WAITING = Gauge("tritonscale_upgrade_waiting_fleets",
                        "InferenceServices whose new pod template from an operator upgrade waits for other "
                        "fleets' rollouts (--max-upgrade-rollouts)")


def source_checked(url: str, ok: bool, up: bool | None = None) -> None:
    """One object's round under ``url``: counted if it failed; the gauge says ``up`` (whether every object
    that queries it answered last; ``ok`` if not given)."""
    source_up(url, ok if up is None else up)
    if not ok:
        METRIC_FAILURES.labels(url).inc()


def source_up(url: str, up: bool) -> None:
    METRIC_SOURCE_UP.labels(url).set(1 if up else 0)


def forget_url(url: str) -> None:
    """A Prometheus URL no InferenceService uses any more: its failure and up series go."""
    for metric in (METRIC_FAILURES, METRIC_SOURCE_UP):
        try:
            metric.remove(url)
        except KeyError:  # never failed, or never checked
            pass


# The (direction, reason) label pairs of DECISIONS counted per object, so that its series go with it.
_decided: dict[tuple[str, str], set[tuple[str, str]]] = {}


def count_decision(namespace: str, name: str, direction: str, reason: str) -> None:
    DECISIONS.labels(namespace, name, direction, reason).inc()
    _decided.setdefault((namespace, name), set()).add((direction, reason))


# By (namespace, name): the uid of the object whose tick last published its series (``claim``). An object
# deleted and created again under its name shares the series' labels: the old one's clean-up, run after its
# last tick, removed the new one's gauges and counts (auditN F4: 9 series to 0 for up to an interval).
_owners: dict[tuple[str, str], str] = {}


def claim(namespace: str, name: str, uid: str) -> None:
    """The object of ``uid`` publishes the series of ``namespace``/``name`` from now on."""
    _owners[(namespace, name)] = uid


def forget(namespace: str, name: str, uid: str | None = None) -> None:
    """Drop the per-object series of a deleted InferenceService: its gauges and its decision counts
    (kept, they grew with every InferenceService ever created). With ``uid``: only while that object
    (not a new one of its name) is the one that published them."""
    owner = _owners.get((namespace, name))
    if uid is not None and owner is not None and owner != uid:
        return
    _owners.pop((namespace, name), None)
    for gauge in (OBSERVED_P95, TARGET_P95, BREACH_P95, DESIRED, READY, FLOOR, MAX_REPLICAS):
        try:
            gauge.remove(namespace, name)
        except KeyError:
            pass
    for direction, reason in list(_decided.pop((namespace, name), set())):  # a copy: a tick may still add
        try:
            DECISIONS.remove(namespace, name, direction, reason)
        except KeyError:
            pass


def set_or_remove(gauge: Gauge, namespace: str, name: str, value: float | None) -> None:
    if value is None:
        try:
            gauge.remove(namespace, name)
        except KeyError:
            pass
    else:
        gauge.labels(namespace, name).set(value)


def publish(namespace: str, name: str, desired: int, ready: int, bounds: tuple[int, int], target_ms: float | None,
            observed_ms: float | None, tolerance: float = 0.0) -> None:
    """A tick's gauges: desired and ready replicas, the spec's bounds (warm floor, maxReplicas), the p95 target
    (and the breach level, target x (1 + ``tolerance``)) and the p95 observed (each removed while unknown --
    observed: idle or no data -- so no stale value stays)."""
    DESIRED.labels(namespace, name).set(desired)
    READY.labels(namespace, name).set(ready)
    FLOOR.labels(namespace, name).set(bounds[0])
    MAX_REPLICAS.labels(namespace, name).set(bounds[1])
    set_or_remove(TARGET_P95, namespace, name, target_ms)
    set_or_remove(BREACH_P95, namespace, name, None if target_ms is None else target_ms * (1.0 + tolerance))
    set_or_remove(OBSERVED_P95, namespace, name, observed_ms)
