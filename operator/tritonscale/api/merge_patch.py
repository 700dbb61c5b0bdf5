"""JSON merge patch (RFC 7386), applied as the API server applies one.

Every write tritonscale makes is a merge patch (``kube/client.py``), so this is also how
it predicts what a write will store: the reconciler's child patches, the status writers'
"did anything change?" (``status.status_patch``). The one deep merge in tritonscale: the
sandbox sizes its sample with it and the tests apply planned patches with it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied: objects merge key by key, ``None`` removes a key,
    anything else (a list, a scalar) replaces. Neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def pointer(*keys: str) -> str:
    """A JSON pointer (RFC 6901) of ``keys``: ``~`` and ``/`` in a key escaped."""
    return "".join("/" + k.replace("~", "~0").replace("/", "~1") for k in keys)


def status_json_patch(uid: str, current: Mapping[str, Any] | None, patch: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON patch (RFC 6902) of an object's ``status`` that stores what the merge patch ``patch`` of it
    would store over ``current`` (the status the writer read), made only if the object is still the one
    of ``uid``: its first operation tests ``metadata.uid``, and the API server then refuses the whole
    patch (422) for another object of the same name -- one deleted and created again while the writer
    held its read. A merge patch cannot say that: a ``metadata.uid`` in it is no precondition, and the
    new object took the old one's status (its desiredReplicas, its autoscaler memory). Each top-level
    field the patch sets is written whole, merged over ``current``'s value; one it sets to None is removed
    if ``current`` has it."""
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
    if not isinstance(current, Mapping) or not current:  # no status yet: the fields' parent is to be made too
        return [*ops, {"op": "add", "path": "/status", "value": merge_patch({}, patch)}]
    for key, value in patch.items():
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": pointer("status", key)})
        else:
            ops.append({"op": "add", "path": pointer("status", key), "value": merge_patch(current.get(key), value)})
    return ops
