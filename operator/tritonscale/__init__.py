"""tritonscale: a Kopf operator that serves models on Triton and autoscales them on p95 latency."""

__version__ = "0.5.0"
