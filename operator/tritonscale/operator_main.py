"""Start the Kopf operator with tritonscale's settings (the `tritonscale run` command)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import kopf


@dataclass
class OperatorOptions:
    namespaces: list[str] = field(default_factory=list)  # empty: cluster-wide
    prometheus_url: str | None = None
    metrics_port: int = 8080  # the operator's own /metrics; 0 disables
    liveness_port: int = 8081  # Kopf's /healthz; 0 disables
    verbose: bool = False
    selector_labels: dict[str, str] = field(default_factory=dict)


OPTIONS = OperatorOptions()


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Keep Kopf's bookkeeping in our own annotation namespace and out of status.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tritonscale.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="tritonscale.io", key="last-handled-configuration"
    )
    settings.persistence.finalizer = "tritonscale.io/finalizer"
    settings.posting.level = logging.INFO
    # A single active replica (see the chart): no peering CRD needed.
    settings.peering.standalone = True
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 30
    settings.execution.max_workers = 16


def run(options: OperatorOptions) -> int:
    global OPTIONS
    OPTIONS = options
    logging.basicConfig(
        level=logging.DEBUG if options.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from tritonscale import handlers  # noqa: F401  (registers the handlers)
    from tritonscale.kube.client import load_credentials

    load_credentials()
    handlers.configure(options)
    liveness = f"http://0.0.0.0:{options.liveness_port}/healthz" if options.liveness_port else None
    try:
        kopf.run(
            clusterwide=not options.namespaces,
            namespaces=options.namespaces,
            standalone=True,
            liveness_endpoint=liveness,
        )
    except KeyboardInterrupt:
        pass
    return 0


