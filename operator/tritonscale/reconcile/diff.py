"""Pure comparison of a desired child with its live counterpart.

The API server defaults many fields (``terminationMessagePath``, probe
timeouts, ``clusterIP``...), so live objects are supersets of what we send.
``contains(live, desired)`` therefore asks "does live already say everything
we want?", recursing into dicts and comparing lists element by element.

Removal of a key we set earlier is handled with the last-applied annotation
(as ``kubectl apply`` does, though it records only the keys): keys present in
the last applied object but gone from the desired one are sent as ``null`` in
the merge patch.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.utils import parse_quantity

from tritonscale.api.merge_patch import merge_patch

LAST_APPLIED = "tritonscale.io/last-applied"


# Maps of resource quantities (a container's ``resources``) and quantity fields (an emptyDir's sizeLimit,
# runtime.shmSize): the API server returns each in its canonical form (``0.5`` -> ``500m``, ``1.5Gi`` ->
# ``1536Mi``, ``1024Mi`` -> ``1Gi``), so they compare by value (a shmSize of 1024Mi was patched every pass).
QUANTITY_MAPS = frozenset({"limits", "requests", "sizeLimit"})


def contains(live: Any, desired: Any, quantities: bool = False) -> bool:
    if isinstance(desired, dict):
        # An empty list or map is omitted by the API server (``omitempty``): a Deployment
        # rendered with ``env: []`` comes back without ``env``, and was patched on every reconcile.
        return isinstance(live, dict) and all(
            contains(live[k], v, quantities or k in QUANTITY_MAPS) if k in live else v in ([], {})
            for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(
            contains(lv, dv) for lv, dv in zip(live, desired, strict=True)
        )
    if quantities and live != desired:
        return _same_quantity(live, desired)
    return bool(live == desired)  # numbers by value: the API server may return 2 for 2.0


# Where a key another writer adds changes what the child does, the child's value is held whole
# (the rest of an object tolerates additions: the API server's defaults, other controllers' labels
# and annotations, as ``kubectl apply`` does). A Service's selector that also asks for ``typo: x``
# matches no pod; a PodDisruptionBudget's likewise protects none; a container given a ``command``
# runs something else than Triton. Maps: keys the desired one lacks are sent as null. Container
# keys: compared whole, absent included; the merge patch then replaces the containers list.
WHOLE_MAPS = {
    "Service": (("spec", "selector"),),
    "PodDisruptionBudget": (("spec", "selector", "matchLabels"),),
}
WHOLE_CONTAINER_KEYS = ("command", "args")
# Keys another writer may add that the API server refuses beside ours: a merge patch putting ours back
# leaves theirs, and the server refuses the result -- a budget given maxUnavailable beside our
# minAvailable ("cannot be both set"). The patch nulls them, as it does a key we applied and no longer
# want; without it the refusal read as an invalid spec (ChildRejected) and the drift stayed, a drain free
# to take every pod.
EXCLUDING_KEYS = {
    "PodDisruptionBudget": (("spec", "maxUnavailable"),),
}
# A Service made an ExternalName sends its clients elsewhere (a DNS alias) while the pods serve, and our
# selector and ports fit it still: it is put back to a ClusterIP. A type of NodePort or LoadBalancer is left
# alone (the spec does not say one: a Service exposed by hand keeps its load balancer).


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def added_keys(kind: str, live: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any] | None:
    """A merge-patch fragment nulling the keys another writer added to a map the child holds whole
    (WHOLE_MAPS), or None."""
    out: dict[str, Any] = {}
    for path in WHOLE_MAPS.get(kind, ()):
        have, want = _at(live, path), _at(desired, path)
        if not isinstance(have, dict) or not isinstance(want, dict):
            continue
        extra = {k: None for k in have if k not in want}
        if extra:
            node = out
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = extra
    return out or None


def excluding_keys(kind: str, live: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any] | None:
    """A merge-patch fragment nulling the EXCLUDING_KEYS another writer set on ``live`` and the desired
    child does not have (and a Service's ExternalName undone, see above), or None."""
    if kind == "Service" and _at(live, ("spec", "type")) == "ExternalName":
        return {"spec": {"type": "ClusterIP", "externalName": None}}
    out: dict[str, Any] = {}
    for path in EXCLUDING_KEYS.get(kind, ()):
        if _at(live, path) is None or _at(desired, path) is not None:
            continue
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = None
    return out or None


def containers_differ(kind: str, live: dict[str, Any], desired: dict[str, Any]) -> bool:
    """A Deployment's container (or init container) whose WHOLE_CONTAINER_KEYS differ from the
    desired one's, a key added included."""
    if kind != "Deployment":
        return False
    for key in ("containers", "initContainers"):
        want = _at(desired, ("spec", "template", "spec", key)) or []
        have = _at(live, ("spec", "template", "spec", key)) or []
        for w, h in zip(want, have, strict=False):
            if isinstance(w, dict) and isinstance(h, dict) and any(w.get(k) != h.get(k) for k in WHOLE_CONTAINER_KEYS):
                return True
    return False


def _union(a: Any, b: Any) -> Any:
    """Two fragments of nulls (``removals``, ``added_keys``) as one, their nulls kept: ``merge_patch``
    would apply them. Where only one side goes deeper, its subtree."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: _union(a[k], v) if k in a else v for k, v in b.items()}}
    return a if b is None else b


def _same_quantity(live: Any, desired: Any) -> bool:
    try:
        return bool(parse_quantity(live) == parse_quantity(desired))
    except ValueError:
        return False


def removals(last: Any, desired: Any) -> Any:
    """A merge-patch fragment nulling keys of ``last`` that ``desired`` no longer has."""
    if not isinstance(last, dict) or not isinstance(desired, dict):
        return None
    out: dict[str, Any] = {}
    for key, old in last.items():
        if key not in desired:
            out[key] = None
        else:
            sub = removals(old, desired[key])
            if sub:
                out[key] = sub
    return out or None


def _with_aliases_nulled(kind: str, gone: dict[str, Any]) -> dict[str, Any]:
    """A pod template's ``serviceAccountName`` removed: its deprecated alias ``serviceAccount``, which
    the API server keeps equal to it and fills it back from, is nulled too. Nulling the name alone
    left both in place, so a ServiceAccount that does not exist could not be taken out of the spec."""
    pod = _at(gone, ("spec", "template", "spec"))
    if kind != "Deployment" or not isinstance(pod, dict) or "serviceAccountName" not in pod:
        return gone
    out: dict[str, Any] = _union(gone, {"spec": {"template": {"spec": {"serviceAccount": None}}}})
    return out


def strip_owned_by_others(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """Fields another controller owns are never part of a patch: for a
    Deployment that is ``spec.replicas``, owned by the autoscaler."""
    if kind == "Deployment" and "replicas" in obj.get("spec", {}):
        obj = {**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "replicas"}}
    return obj


def key_structure(obj: Any) -> Any:
    """The maps of ``obj`` with every other value (scalars and lists) as null: all ``removals``
    reads. A list is replaced whole by a merge patch, so its items never need a removal."""
    return {k: key_structure(v) for k, v in obj.items()} if isinstance(obj, dict) else None


def with_last_applied(desired: dict[str, Any]) -> dict[str, Any]:
    """Record which keys we applied, so a later removal can be detected. Their values are not
    recorded: a note of the whole object (as ``kubectl apply`` keeps) doubled a large env or
    config, and an env of about 160 KB made the Deployment's annotations longer than the API
    server's 256 KiB."""
    body = strip_owned_by_others(desired["kind"], desired)
    note = json.dumps(key_structure({k: body[k] for k in body if k not in ("metadata", "apiVersion", "kind")}),
                      sort_keys=True, separators=(",", ":"))
    meta = dict(desired["metadata"])
    meta["annotations"] = {**meta.get("annotations", {}), LAST_APPLIED: note}
    return {**desired, "metadata": meta}


def plan_patch(desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that makes ``live`` match ``desired``, or None if nothing to do.

    ``desired`` must already carry the last-applied annotation (``with_last_applied``).
    """
    want = strip_owned_by_others(desired["kind"], desired)
    body = {k: v for k, v in want.items() if k not in ("apiVersion", "kind")}
    body["metadata"] = {k: want["metadata"][k] for k in ("labels", "annotations", "ownerReferences")
                        if k in want["metadata"]}
    raw = (live.get("metadata", {}).get("annotations") or {}).get(LAST_APPLIED)
    try:
        last = json.loads(raw) if raw else {}
    except (ValueError, RecursionError):  # json recurses per level: a deep nesting is no ValueError
        last = {}
    last = strip_owned_by_others(desired["kind"], last) if isinstance(last, dict) else {}
    gone = removals(last, {k: v for k, v in body.items() if k != "metadata"}) or {}
    gone = _union(gone, added_keys(desired["kind"], live, body) or {})
    gone = _union(gone, excluding_keys(desired["kind"], live, body) or {})
    gone = _with_aliases_nulled(desired["kind"], gone)
    if contains(live, body) and not gone and not containers_differ(desired["kind"], live, body):
        return None
    patch: dict[str, Any] = merge_patch(gone, body)  # the desired fields, and a null for each one removed
    return patch
