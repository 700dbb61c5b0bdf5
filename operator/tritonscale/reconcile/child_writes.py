"""Writing the children a pass planned (its dry runs passed), and saying what was written: an event and
a log line for each child created, adopted, replaced or put back, naming the other writers a child
put back had (``writers``). ``Outcome`` records what the pass did."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritonscale.api.spec import RENDERED_BY_ANNOTATION
from tritonscale.api.validation import Problem
from tritonscale.kube.client import OWN_MANAGERS, Kube
from tritonscale.reconcile.child_refusals import Write, holds_other_content
from tritonscale.reconcile.diff import LAST_APPLIED
from tritonscale.reconcile.reconciler_status import EventFn, write_failed
from tritonscale.render.kubernetes_objects import owned_by

log = logging.getLogger("tritonscale")


@dataclass
class Outcome:
    valid: bool
    created: list[str] = field(default_factory=list)
    patched: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # children whose names something else holds
    adopted: list[str] = field(default_factory=list)  # orphans of this object's taken back (``adoptable``)
    # immutable ConfigMaps found with other content, deleted and created again (``holds_other_content``)
    replaced: list[str] = field(default_factory=list)
    # Children patched back (in ``patched``) with the other writers their fields had: kubectl edit, a GitOps
    # tool's server-side apply (``writers``)
    changed_by: dict[str, list[str]] = field(default_factory=dict)
    # After a whole pass: each child ("Kind/name") at the resourceVersion the pass read or wrote it, so
    # a watch event of that very version (Kopf's listing at a restart, the echo of the pass's own write)
    # has nothing new to reconcile. Empty when the pass stopped short (a conflict, a refusal).
    seen: dict[str, str] = field(default_factory=dict)
    # An operator upgrade's rollout that waits: the Deployments rolling out meanwhile (upgrade_rollouts).
    # Nothing was written; the end of another rollout or the resync tries again (handlers).
    upgrade_waits_for: list[str] = field(default_factory=list)


def what_it_does(child: dict[str, Any] | None) -> Any:
    """A child as its users see it: everything but its status, its version bookkeeping and the
    operator's last-applied record. A patch that changed only that record (an upgrade writes it in a
    new format) was reported as "updated ... to match the spec" for every child of every service. The
    operator version that rendered a Deployment is bookkeeping too: a new version writes it everywhere."""
    if child is None:
        return None
    meta = child.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                   if k not in (LAST_APPLIED, RENDERED_BY_ANNOTATION)}
    return ({k: v for k, v in child.items() if k not in ("metadata", "status")},
            meta.get("labels") or {}, annotations, meta.get("ownerReferences"))


def template_of(deployment: dict[str, Any]) -> Any:
    """A Deployment's pod template (a change is a rollout: a new ReplicaSet, every pod replaced)."""
    return (deployment.get("spec") or {}).get("template")


def write_children(kube: Kube, body: dict[str, Any], writes: list[Write], outcome: Outcome, event: EventFn,
                    now: Callable[[], float]) -> tuple[dict[str, Any] | None, bool]:
    """Create or patch each child (dry runs passed), recording what was done in ``outcome``. Returns the
    Deployment as written, and whether its pod template changed (every pod reported is then of the old
    one). A failed write records WriteFailed and raises: Kopf tries the handler again."""
    meta = body["metadata"]
    ns, uid = meta["namespace"], meta["uid"]
    deployment, template_written = None, False
    for child, live, patch in writes:
        kind, cname = child["kind"], child["metadata"]["name"]
        before = live
        try:
            if live is not None and holds_other_content(child, live):
                kube.delete_config_map(ns, cname, live["metadata"]["uid"])
                outcome.replaced.append(f"{kind}/{cname}")
                if others := writers(live, {"data": child.get("data"), "binaryData": None}):
                    outcome.changed_by[f"{kind}/{cname}"] = others
                live = kube.create(child)
            elif live is None:
                live = kube.create(child)
                outcome.created.append(f"{kind}/{cname}")
            elif patch is not None:
                if not owned_by(live, uid):  # adopted: its other (non-controller) owners stay
                    refs = [r for r in (live["metadata"].get("ownerReferences") or []) if isinstance(r, dict)]
                    patch = {**patch, "metadata": {**(patch.get("metadata") or {}),
                                                   "ownerReferences": refs + child["metadata"]["ownerReferences"]}}
                live = kube.patch(kind, ns, cname, patch)
                if before is not None and not owned_by(before, uid):
                    outcome.adopted.append(f"{kind}/{cname}")
                elif what_it_does(before) != what_it_does(live):
                    outcome.patched.append(f"{kind}/{cname}")
                    if before is not None and (others := writers(before, patch)):
                        outcome.changed_by[f"{kind}/{cname}"] = others
                else:  # the operator's own record alone (an upgrade's new last-applied format)
                    log.debug("%s/%s: refreshed the last-applied record of %s/%s", ns, meta["name"], kind, cname)
        except Exception as exc:
            write_failed(kube, body, f"{kind}/{cname}", exc, event, now())
            raise
        version = ((live or {}).get("metadata") or {}).get("resourceVersion")
        if version:
            outcome.seen[f"{kind}/{cname}"] = str(version)
        if kind == "Deployment":
            deployment = live
            # The pod template as the API server has it, before and after: a patch always carries the
            # whole template, and an edit of spec.scaling alone (the spec annotation) said "the pods
            # roll" and set Ready to RollingOut for a pass while no pod rolled.
            template_written = patch is not None and before is not None and live is not None and (
                template_of(before) != template_of(live))
    return deployment, template_written


def _owns_any(patch: Any, fields: Any) -> bool:
    """Whether a managedFields ``fieldsV1`` tree owns a field the merge ``patch`` sets or removes: a field of
    it, or anything below a value the patch replaces whole (a scalar, a list, a null)."""
    if not isinstance(patch, dict) or not isinstance(fields, dict):
        return False
    for key, value in patch.items():
        sub = fields.get(f"f:{key}")
        if sub is None:
            continue
        deeper = isinstance(value, dict) and value and isinstance(sub, dict) and any(k.startswith("f:") for k in sub)
        if not deeper or _owns_any(value, sub):
            return True
    return False


def writers(child: dict[str, Any], patch: dict[str, Any]) -> list[str]:
    """The field managers other than this operator's that own a field of the child ``patch`` puts back (not
    through a status or scale subresource: its controller's, an HPA's), by name: ``kubectl-edit``,
    ``kubectl-patch``, a GitOps tool. Only those fields: a `kubectl rollout restart` owns its annotation of
    the pod template, which a later change of the spec does not touch."""
    out: list[str] = []
    for entry in (child.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict) or entry.get("subresource") or entry.get("manager") in OWN_MANAGERS:
            continue
        manager = str(entry.get("manager") or "an unnamed writer")
        if manager not in out and _owns_any(patch, entry.get("fieldsV1")):
            out.append(manager)
    return out


def announce_writes(outcome: Outcome, template_written: bool, event: EventFn, ns: str, name: str,
              spec_unchanged: bool = False) -> None:
    """An event and a log line for each child created, adopted or changed. A child changed back while the
    spec is the one the last pass applied (``spec_unchanged``) was changed by someone else: a Warning
    naming them (another tool applying it would fight the operator at every sync, a rollout each time
    for a pod template)."""
    for ref in outcome.created:
        event("Normal", "Created", f"created {ref}")
        log.info("%s/%s: created %s", ns, name, ref)
    for ref in outcome.adopted:
        message = (f"adopted {ref}: it carries this InferenceService's labels and no owner (left by a deletion "
                   f"with --cascade=orphan?), and now matches the spec")
        event("Normal", "Adopted", message)
        log.info("%s/%s: %s", ns, name, message)
    for ref in outcome.replaced:
        by = f" by {', '.join(outcome.changed_by[ref])}" if ref in outcome.changed_by else ""
        message = (f"replaced {ref}: its data had been changed{by}, not through this InferenceService, and an "
                   f"immutable ConfigMap cannot be patched back. Pods that started meanwhile load the changed "
                   f"config until they restart")
        event("Warning", "DriftReverted", message)
        log.warning("%s/%s: %s", ns, name, message)
    for ref in outcome.patched:
        # a new pod template replaces every pod, a cold start each: say so where the edit is seen
        rolls = "; a new pod template: the pods roll" if template_written and ref.startswith("Deployment/") else ""
        others = outcome.changed_by.get(ref)
        if spec_unchanged and others:
            message = (f"put {ref} back as the spec says{rolls}: it had been changed by {', '.join(others)}, not "
                       f"through this InferenceService. The operator owns its children: change the "
                       f"InferenceService, or a tool that applies the child too will be undone at every sync")
            event("Warning", "DriftReverted", message[:1000])
            log.warning("%s/%s: %s", ns, name, message)
            continue
        event("Normal", "Updated", f"updated {ref} to match the spec{rolls}")
        log.info("%s/%s: updated %s to match the spec%s", ns, name, ref, rolls)


def warn_dry_run_warnings(warned: list[Problem], event: EventFn, ns: str, name: str) -> None:
    """Warnings the API server gave on the dry runs, which the user would never see: kubectl prints the
    warnings of the objects it writes, and the operator writes these (an env var a later one of its name
    hides, a memory request of "0.5": half a byte)."""
    said = "; ".join(str(p) for p in warned)
    event("Warning", "ChildWarning", f"the API server warns: {said}"[:1000])
    log.warning("%s/%s: the API server warns: %s", ns, name, said)
