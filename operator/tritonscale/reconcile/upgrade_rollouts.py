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
again when one of the operator's Deployments gives up its place (``handlers.reconciler.child_changed``: the oldest
waiters first), and at the periodic resync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonscale import __version__
from tritonscale.api import status as st
from tritonscale.api.spec import RENDERED_BY_ANNOTATION as RENDERED_BY
from tritonscale.reconcile.diff import contains
from tritonscale.render.kubernetes_objects import MANAGED_BY, MANAGER

# One rollout at a time: room for one fleet's surge pods, and a rendering that breaks pods stops at the
# first fleet it rolls (the module's docstring). 0 lifts the limit: every fleet rolls at once.
DEFAULT_MAX_ROLLOUTS = 1
# An admitted rollout the watch has not shown within this (its write failed, the watch is down) gives up
# its place: far longer than a write's echo takes, short against a rollout.
ADMITTED_TTL_S = 60.0
# ... and it lists the Deployments again, when asked, once this old: a deletion the watch missed (it was
# down, and a relist after it shows no DELETED event) would hold its place for good. The resync's period.
RELIST_S = 300.0


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


def waiting_message(others: list[str], max_rollouts: int, version: str) -> str:
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (f"the operator's new version ({version}) renders another pod template for this unchanged spec; it "
            f"rolls out once fewer than {max_rollouts} other fleet(s) are rolling out (--max-upgrade-rollouts): "
            f"now {shown}. The pods keep the earlier template and serve meanwhile; a change of the spec rolls "
            f"at once")


@dataclass
class UpgradeGate:
    """Admits an upgrade's rollout while fewer than ``max_rollouts`` of the operator's other Deployments
    hold a place (``holds_a_place``). One per operator process (only the leader writes).

    It knows which Deployments hold a place as a controller's lister does: a list of the operator's
    Deployments at its first question (and again after ``RELIST_S``), then the watch's events
    (``observe``, from the handler the operator already has for its children). A list per question
    cost a read of every Deployment per waiting fleet: 1,000 reads of 1,000 at a restart.

    A rollout it admits holds its place from the admission (``_admitted``) until the watch shows that
    write (its generation), so that two passes cannot both take the last place between a write and its
    event. An admission the watch never confirms (the write failed) lets go after ``ADMITTED_TTL_S``."""

    max_rollouts: int = DEFAULT_MAX_ROLLOUTS
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    version: str = __version__  # this operator's (``RENDERED_BY``)
    selector: str = f"{MANAGED_BY}={MANAGER}"  # the operator's own Deployments
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _holding: set[str] = field(default_factory=set, repr=False)
    _admitted: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)  # ref -> (generation, when)
    _listed_at: float | None = field(default=None, repr=False)

    def observe(self, deployment: Mapping[str, Any], deleted: bool = False) -> bool:
        """A watch event of one of the operator's Deployments. True when it gave up a place it held
        (its rollout ended, it was paused, or it went): a waiting fleet may go now."""
        key = ref(deployment)
        generation = int((deployment.get("metadata") or {}).get("generation") or 0)
        holds = not deleted and holds_a_place(deployment, self.version)
        with self._lock:
            admitted = self._admitted.get(key)
            if admitted is not None and (deleted or generation >= admitted[0]):
                del self._admitted[key]  # the watch has caught up with the admitted write
            else:
                admitted = None
            held = key in self._holding or admitted is not None
            if holds:
                self._holding.add(key)
            else:
                self._holding.discard(key)
            return held and not holds and key not in self._admitted

    def _taken(self, now: float) -> set[str]:
        """The places held now (under the lock): the watch's, and the admissions not yet past their TTL."""
        for key in [k for k, (_, when) in self._admitted.items() if now - when > ADMITTED_TTL_S]:
            del self._admitted[key]
        return self._holding | set(self._admitted)

    def has_room(self, now: float | None = None) -> bool:
        """Whether a place is free, by what the gate knows now (no list: before its first question it
        knows nothing held, and that question lists)."""
        with self._lock:
            taken = self._taken(time.monotonic() if now is None else now)
            return self.max_rollouts <= 0 or len(taken) < self.max_rollouts

    def admit(self, kube: DeploymentLister, namespace: str, name: str, generation: int,
              now: float | None = None) -> list[str]:
        """[] to go ahead -- the caller then writes the Deployment, now at ``generation``, and this
        rollout holds its place from here -- or the Deployments holding the places, to wait."""
        if self.max_rollouts <= 0:
            return []
        now = time.monotonic() if now is None else now
        me = f"{namespace}/{name}"
        with self._lock:
            if self._listed_at is None or now - self._listed_at >= RELIST_S:  # then the watch's events
                holding: set[str] = set()
                for ns in self.namespaces or (None,):
                    holding |= {ref(d) for d in kube.list_deployments(ns, self.selector)
                                if holds_a_place(d, self.version)}
                self._holding, self._listed_at = holding, now
            others = sorted(self._taken(now) - {me})
            if len(others) >= self.max_rollouts:
                return others
            self._admitted[me] = (generation + 1, now)  # a write of the template moves the generation on
            return []
