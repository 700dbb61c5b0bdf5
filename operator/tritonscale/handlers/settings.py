"""The operator's settings, which ``configure`` sets once before Kopf starts (``tritonscale run``), and what
the handlers read of them: the API client, the Prometheus URL and the URLs a spec may name instead, the
snapshot cache the ticks share.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import urllib3

from tritonscale.kube.client import Kube
from tritonscale.reconcile.inference_service import UPGRADES
from tritonscale.scaling import operator_metrics as om
from tritonscale.scaling.prometheus_http import allowed_by, shown_url
from tritonscale.scaling.prometheus_source import PrometheusSource
from tritonscale.scaling.promql_queries import SeriesSelector
from tritonscale.scaling.snapshot_cache import SnapshotCache

log = logging.getLogger("tritonscale")

# Set by the CLI before Kopf starts (see tritonscale.operator_main).
KUBE: Kube | None = None
PROMETHEUS_URL: str | None = None
ALLOWED_PROMETHEUS_URLS: tuple[str, ...] = ()  # tritonscale run --allowed-prometheus-url; empty: any
SNAPSHOTS: SnapshotCache | None = None


def _kube() -> Kube:
    global KUBE
    if KUBE is None:
        KUBE = Kube()
    return KUBE


def _snapshots() -> SnapshotCache:
    global SNAPSHOTS
    if SNAPSHOTS is None:
        SNAPSHOTS = SnapshotCache(lambda url: PrometheusSource(url), on_forget=_forget_url)
    return SNAPSHOTS


def _forget_url(url: str) -> None:
    """A Prometheus URL no InferenceService uses any more (SnapshotCache forgot it): its failure series
    goes, unless another URL in use shows as the same label (they differ only in credentials)."""
    label = shown_url(url)
    if SNAPSHOTS is None or not any(shown_url(u) == label for u in SNAPSHOTS.urls()):
        om.forget_url(label)


def not_allowed(url: str | None) -> str | None:
    """Why a spec's Prometheus URL is not queried (``--allowed-prometheus-url`` given, and it is none of
    them nor under one), else None. The operator's pod sends the queries: a URL in a spec could make it
    reach any address it can (README, "Who may create InferenceServices")."""
    if not url or not ALLOWED_PROMETHEUS_URLS or allowed_by(url, ALLOWED_PROMETHEUS_URLS):
        return None
    return (f"spec.scaling.prometheus.url {shown_url(url)} is not a Prometheus this operator may query "
            f"(its --allowed-prometheus-url: {', '.join(shown_url(u) for u in ALLOWED_PROMETHEUS_URLS)}); "
            f"name one of them, or a path under one")


def configure(options: Any) -> None:
    """Called once by `tritonscale run` before Kopf starts."""
    global KUBE, PROMETHEUS_URL, SNAPSHOTS, ALLOWED_PROMETHEUS_URLS
    KUBE = Kube()
    PROMETHEUS_URL = options.prometheus_url
    UPGRADES.max_rollouts = options.max_upgrade_rollouts
    UPGRADES.namespaces = tuple(options.namespaces)
    ALLOWED_PROMETHEUS_URLS = tuple(getattr(options, "allowed_prometheus_urls", ()) or ())
    verify = options.prometheus_tls_verify
    selector = SeriesSelector(namespaces=tuple(options.namespaces), extra=tuple(options.selector_labels.items()))
    SNAPSHOTS = SnapshotCache(lambda url: PrometheusSource(url, selector, verify=verify), on_forget=_forget_url)
    if not PROMETHEUS_URL:  # said once at start, not only in each service's first tick
        log.warning("no Prometheus URL (--prometheus-url, TRITONSCALE_PROMETHEUS_URL): an InferenceService "
                    "without spec.scaling.prometheus.url is held within its bounds (MetricsUnavailable; "
                    "fallbackReplicas after failureThreshold, if set)")
    if verify is False:  # asked for: said once here, not urllib3's warning on every query
        log.warning("Prometheus's TLS certificates are not checked (--prometheus-insecure-skip-tls-verify)")
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    if options.metrics_port:
        from prometheus_client import REGISTRY
        from prometheus_client.exposition import MetricsHandler

        from tritonscale import http_listener

        http_listener.serve(options.metrics_port, MetricsHandler.factory(REGISTRY), "metrics")
