"""api/merge_patch.status_json_patch: a status write conditional on the object's uid, storing what the
merge patch of the same fields would (tests/integration/test_reconcile_freshest_spec.py runs it against
the real API server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tritonscale.api.merge_patch import merge_patch, pointer, status_json_patch

UID = "5f1c"


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 for the operations status_json_patch makes (test, add, remove), as the API server applies
    them: all or nothing."""
    out = copy.deepcopy(obj)
    for op in ops:
        *parents, last = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        node = out
        for key in parents:
            node = node[key]  # a missing parent: KeyError, the API server's 422
        if op["op"] == "test":
            if node.get(last) != op["value"]:
                raise ValueError(f"test {op['path']} failed")
        elif op["op"] == "add":
            node[last] = copy.deepcopy(op["value"])
        else:
            del node[last]
    return out


CASES = [
    ({"desiredReplicas": 2, "scalingState": {"a": {"b": 1}, "c": [1, None]}},
     {"desiredReplicas": 3, "scalingState": {"a": {"d": 2}, "c": [2]}}),
    ({"desiredReplicas": 2, "model": "m"}, {"model": None, "conditions": [{"type": "Ready"}]}),
    ({"x": 1}, {"absent": None}),  # removing what is not there: nothing to do
    ({}, {"observedGeneration": 4, "batching": {"source": "spec", "gone": None}}),  # no status yet
    (None, {"observedGeneration": 1}),
    ({"a/b~c": 1}, {"a/b~c": 2}),  # keys a JSON pointer must escape
]


@pytest.mark.parametrize(("current", "patch"), CASES)
def test_it_stores_what_the_merge_patch_would(current, patch):
    obj = {"metadata": {"uid": UID}, **({"status": current} if current is not None else {})}
    stored = apply(obj, status_json_patch(UID, current, patch))
    assert stored["status"] == merge_patch(current or {}, patch)
    assert stored["metadata"] == {"uid": UID}


@pytest.mark.parametrize(("current", "patch"), CASES)
def test_another_object_of_the_name_refuses_it_whole(current, patch):
    obj = {"metadata": {"uid": "another"}, "status": {"desiredReplicas": 9}}
    ops = status_json_patch(UID, current, patch)
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": UID}
    with pytest.raises(ValueError, match="test /metadata/uid failed"):
        apply(obj, ops)


def test_pointer_escapes_tilde_and_slash():
    assert pointer("status", "a/b~c") == "/status/a~1b~0c"
