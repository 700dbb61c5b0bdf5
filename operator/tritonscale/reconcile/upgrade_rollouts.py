"""An operator upgrade rolls the Triton fleets a few at a time, not all at once.

A new operator version may render another pod template for a spec nobody changed (a new tritonserver
flag, a new annotation). Applied to every InferenceService in its first pass, every fleet rolls at
the same moment:

* every fleet's surge pods ask for GPUs together. With ``maxUnavailable: 0`` no old pod goes before a
  new one is ready, so on a cluster without a free GPU per fleet the surges stay Pending and no
  rollout moves;
* a rendering whose pods never become ready (a flag the image refuses) breaks every fleet's rollout
  at once.

So a pass that would roll a fleet *for the upgrade alone* waits while ``max_rollouts`` of the
operator's other Deployments are rolling out (for any reason: a spec edit, the batching tuner, an
upgrade). With the default of one, the cluster needs room for one fleet's surge, and a rendering that
breaks its pods stops at the first fleet: its rollout never finishes (``Ready`` says RolloutStuck), and
the others keep the earlier template and serve.

A pass is the upgrade's (``is_upgrade``) when all of these hold:

* the live Deployment was rendered by another operator version (``RENDERED_BY``, absent before it);
* the InferenceService's spec is the one the last pass applied (``status.observedGeneration`` is its
  generation): a spec edit rolls at once, with the new rendering in it;
* the pod template would change;
* no other writer owns what the patch puts back (a ``kubectl edit`` undone is not deferred).

While it waits the pass writes no child and says why in the ``UpgradePending`` condition. It is tried
again when one of the operator's Deployments ends a rollout (``handlers.child_changed``: the oldest
waiters first), and at the periodic resync.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonscale import __version__
from tritonscale.api import status as st
from tritonscale.api.spec import RENDERED_BY_ANNOTATION as RENDERED_BY
from tritonscale.reconcile.diff import contains

# One rollout at a time: room for one fleet's surge pods, and a rendering that breaks pods stops at the
# first fleet it rolls (the module's docstring). 0 lifts the limit: every fleet rolls at once.
DEFAULT_MAX_ROLLOUTS = 1


class DeploymentLister(Protocol):
    def list_deployments(self, namespace: str | None, label_selector: str) -> list[dict[str, Any]]: ...


def rendered_by(deployment: Mapping[str, Any]) -> str | None:
    """The operator version that rendered ``deployment`` (None: one before ``RENDERED_BY``)."""
    return ((deployment.get("metadata") or {}).get("annotations") or {}).get(RENDERED_BY)


def _template(deployment: Mapping[str, Any]) -> Any:
    return (deployment.get("spec") or {}).get("template")


def is_upgrade(live: Mapping[str, Any], desired: Mapping[str, Any], version: str, spec_unchanged: bool,
               other_writers: list[str]) -> bool:
    """Whether writing ``desired`` over ``live`` rolls the fleet for an operator upgrade alone (the
    module's docstring). The template is compared as the reconciler compares a child (``contains``:
    the API server's defaults in ``live`` are no change)."""
    return (rendered_by(live) != version and spec_unchanged and not other_writers
            and not contains(_template(live), _template(desired)))


def ref(deployment: Mapping[str, Any]) -> str:
    meta = deployment.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def holds_a_place(deployment: Mapping[str, Any], version: str) -> bool:
    """Whether ``deployment`` rolls out in a way that counts against the gate: pods of an earlier
    template still there, or a write the controller has not acted on yet. Not while paused (``kubectl
    rollout pause``: no surge pod is made, and it would hold the place until someone resumes it), and
    not a rollout stuck past its progress deadline that this version did not start (rendered by an
    older one: a fleet broken before the upgrade would hold every other fleet back for good). A stuck
    rollout of this version's template does count: the upgrade stops there."""
    rollout = st.deployment_rollout(deployment)
    if not rollout.updating or (deployment.get("spec") or {}).get("paused"):
        return False
    return rollout.stalled is None or rendered_by(deployment) == version


def rolling(deployments: list[dict[str, Any]], besides: str, version: str) -> list[str]:
    """The Deployments (``namespace/name``) other than ``besides`` that hold a place (``holds_a_place``)."""
    return sorted(ref(d) for d in deployments if ref(d) != besides and holds_a_place(d, version))


def waiting_message(others: list[str], max_rollouts: int, version: str) -> str:
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (f"the operator's new version ({version}) renders another pod template for this unchanged spec; it "
            f"rolls out once fewer than {max_rollouts} other fleet(s) are rolling out (--max-upgrade-rollouts): "
            f"now {shown}. The pods keep the earlier template and serve meanwhile; a change of the spec rolls "
            f"at once")


@dataclass
class UpgradeGate:
    """Admits an upgrade's rollout while fewer than ``max_rollouts`` of the operator's other Deployments
    roll out. One per operator process (only the leader writes). The lock is held while the admitted
    pass writes its Deployment, so that the next pass's list sees that rollout (its generation moves
    on the write): two passes cannot both take the last place."""

    max_rollouts: int = DEFAULT_MAX_ROLLOUTS
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    version: str = __version__  # this operator's (``RENDERED_BY``)
    selector: str = "app.kubernetes.io/managed-by=tritonscale"
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def admit(self, kube: DeploymentLister, namespace: str, name: str) -> Iterator[list[str]]:
        """Yields [] to go ahead (write the Deployment inside the block), or the Deployments rolling out
        that make this one wait."""
        if self.max_rollouts <= 0:
            yield []
            return
        with self._lock:
            deployments: list[dict[str, Any]] = []
            for ns in self.namespaces or (None,):
                deployments += kube.list_deployments(ns, self.selector)
            others = rolling(deployments, f"{namespace}/{name}", self.version)
            yield others if len(others) >= self.max_rollouts else []
