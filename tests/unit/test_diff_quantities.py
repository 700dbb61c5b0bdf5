"""reconcile/diff.py: quantities compare by value, as the API server writes them in its canonical form."""

from __future__ import annotations

import copy

import pytest

from support.rendered import children
from support.spec_cases import load_sample, mutate
from tritonscale.reconcile.diff import plan_patch, with_last_applied


@pytest.mark.parametrize(("given", "stored"), [("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("0.5Gi", "512Mi")])
def test_a_shm_size_the_api_server_rewrites_needs_no_patch(given: str, stored: str) -> None:
    """Session 86's review, on a real API server: runtime.shmSize 1024Mi comes back as 1Gi, and the Deployment
    was patched at every pass (and would wait at the upgrade gate at the next operator upgrade)."""
    desired = with_last_applied(children(mutate(load_sample(), {"spec.runtime.shmSize": given}))["Deployment"])
    live = copy.deepcopy(desired)
    volume = next(v for v in live["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
    volume["emptyDir"]["sizeLimit"] = stored
    assert plan_patch(desired, live) is None
    volume["emptyDir"]["sizeLimit"] = "2Gi"  # another size is a change
    assert plan_patch(desired, live) is not None
