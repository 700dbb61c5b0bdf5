"""Autoscaling policies for the simulator, one file each, behind ``engine.Autoscaler`` (the baselines
share ``periodic.Periodic``: a fixed tick, replica bounds and a count to start from).

``simulate.benchmark.build(name, ...)`` turns a ``--policy`` value into an autoscaler:

* ``tritonscale`` -- the operator's own decider (``tritonscale.scaling.decider``), imported;
* ``hpa`` -- Kubernetes HPA on GPU duty cycle (utilisation target);
* ``keda`` -- KEDA's Prometheus scaler on request rate (an HPA underneath);
* ``kpa`` -- Knative's KPA on concurrency, with stable and panic windows;
* ``triton-queue`` -- Triton's k8s-onprem recipe: an HPA on average queue time per request;
* ``slo-ratio`` -- llm-d's KEDA control law on p90/SLO with a hysteresis band and in-flight credit;
* ``static:N`` -- N warm replicas, never scaled;
* ``oracle`` -- the cheapest per-minute schedule that meets the SLO, planned offline.
"""

from __future__ import annotations

POLICY_NAMES = ("tritonscale", "hpa", "keda", "kpa", "triton-queue", "slo-ratio", "oracle")  # plus static:N


def parse_static(name: str) -> int | None:
    """N for ``static:N``; None for any other name. Raises ValueError on a bad N."""
    if not name.startswith("static:"):
        return None
    try:
        n = int(name.split(":", 1)[1])
    except ValueError:
        raise ValueError(f"static:N needs a whole number of replicas, got {name!r}") from None
    if n < 1:
        raise ValueError(f"static:N needs N >= 1, got {n}")
    return n


def validate_name(name: str) -> str:
    if name in POLICY_NAMES or name == "all" or parse_static(name) is not None:
        return name
    raise ValueError(f"unknown policy {name!r}: use one of {', '.join(POLICY_NAMES[:-1])}, static:N, oracle, all")
