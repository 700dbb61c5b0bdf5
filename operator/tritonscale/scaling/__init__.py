"""Autoscaling: the pure decider, the metric source and the per-object tick."""
