"""Kopf handlers: thin adapters from Kopf's kwargs to the reconciler and autoscaler.

Nothing here decides anything; see ``reconcile/`` and ``scaling/``. Importing this package registers
every handler with Kopf (``tritonscale run`` does), the reconciler's first, as when they were one module:
``reconciler`` (an InferenceService's resume, create, update and batching settings in force; its
children's events) and ``autoscale_daemon`` (one autoscaler loop per InferenceService, its deletion,
the operator's stop). Both use ``settings`` (what ``configure`` sets before Kopf starts) and ``events``
(the Events they post). A test patches a name in the module that looks it up (``reconciler.reconcile``,
``settings.KUBE``), not here.
"""

from __future__ import annotations

from tritonscale.handlers import autoscale_daemon, events, reconciler, settings
from tritonscale.handlers.settings import _kube, configure  # tritonscale.operator_main's

__all__ = ["_kube", "autoscale_daemon", "configure", "events", "reconciler", "settings"]
