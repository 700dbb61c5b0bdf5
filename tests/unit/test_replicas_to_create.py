"""reconcile: a Deployment created again (deleted by hand) comes back at the size the autoscaler last
asked for (status.desiredReplicas), within the warm floor and maxReplicas; a first one at the floor.
While a pass writes no child (the spec refused), status counts the Deployment that keeps serving."""

from __future__ import annotations

from typing import Any

import pytest

from support.spec_cases import load_sample
from tritonscale.api.spec import InferenceServiceSpec
from tritonscale.reconcile.inference_service import replicas_to_create
from tritonscale.reconcile.reconciler_status import counts_from


def spec(min_replicas: int, warm_buffer: int, max_replicas: int) -> InferenceServiceSpec:
    doc = load_sample()  # python-cpu.yaml
    doc["spec"]["scaling"].update(minReplicas=min_replicas, warmBuffer=warm_buffer, maxReplicas=max_replicas)
    return InferenceServiceSpec.model_validate(doc["spec"])


@pytest.mark.parametrize(("status", "expected"), [
    (None, 2),                          # a first create: the floor (min 1 + buffer 1)
    ({}, 2),
    ({"desiredReplicas": 3}, 3),        # what the load needed before the Deployment went
    ({"desiredReplicas": 1}, 2),        # never below the floor
    ({"desiredReplicas": 9}, 4),        # nor above maxReplicas (lowered since)
    ({"desiredReplicas": None}, 2),
    ({"desiredReplicas": "3"}, 2),      # not a count: the floor
    ({"desiredReplicas": True}, 2),
])
def test_replicas_to_create(status: dict[str, Any] | None, expected: int) -> None:
    assert replicas_to_create(spec(1, 1, 4), status) == expected


UID = "owner-uid"


def deployment(replicas: int | None, ready: int | None, owner: str = UID) -> dict[str, Any]:
    status = {} if ready is None else {"readyReplicas": ready}
    return {"metadata": {"ownerReferences": [{"uid": owner}]}, "spec": {"replicas": replicas}, "status": status}


@pytest.mark.parametrize(("live", "expected"), [
    (deployment(3, 2), {"replicas": 3, "readyReplicas": 2}),    # the last valid generation's children serve
    (deployment(3, None), {"replicas": 3, "readyReplicas": 0}),  # no pod ready yet: the field is absent
    (None, {"replicas": None, "readyReplicas": 0}),              # the Deployment deleted meanwhile
    (deployment(3, 2, owner="someone-else"), None),              # another object's: not ours to count
])
def test_counts_follow_the_owned_deployment_while_nothing_is_written(live: dict[str, Any] | None,
                                                                   expected: dict[str, Any] | None) -> None:
    counts = counts_from(live, UID)
    assert (None if counts is None else counts.model_dump(by_alias=True, exclude_unset=True)) == expected
