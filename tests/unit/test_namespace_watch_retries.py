"""kopf_settings.NamespaceWatchRetries: Kopf's backoffs, endless only for its watches in one namespace
of several (the integration test: tests/integration/test_operator_namespaced.py)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tritonscale.kopf_settings import NamespaceWatchRetries


def _taken(task_name: str | None) -> list[float]:
    """The backoffs Kopf would iterate in a task of that name (None: outside any event loop), up to 200."""
    if task_name is None:
        return list(itertools.islice(NamespaceWatchRetries(), 200))

    async def inside() -> list[float]:
        return list(itertools.islice(NamespaceWatchRetries(), 200))

    async def main() -> list[float]:
        return await asyncio.create_task(inside(), name=task_name)

    return asyncio.run(main())


@pytest.mark.parametrize(("task", "endless"), [
    ("watcher for inferenceservices.v1alpha1.tritonscale.io@team-x", True),
    ("watcher for deployments.v1.apps@team-x", True),  # the children's watches in that namespace too
    # cluster-wide: a watch that may not list serves nothing -- Kopf fails, the process exits 1
    ("watcher for inferenceservices.v1alpha1.tritonscale.io@None", False),
    # Kopf's fallbacks (the --namespace list for a namespace list it may not make) need its backoffs to end
    ("namespace observer", False),
    ("resource observer", False),
    ("worker for inferenceservices.v1alpha1.tritonscale.io@team-x/linear", False),
    (None, False),
])
def test_only_a_namespaces_watch_retries_without_end(task: str | None, endless: bool) -> None:
    backoffs = _taken(task)
    assert backoffs[:8] == list(NamespaceWatchRetries.FIRST)  # Kopf's own defaults first
    if endless:
        assert len(backoffs) == 200 and set(backoffs[8:]) == {NamespaceWatchRetries.RETRY_EVERY_S}
    else:
        assert len(backoffs) == 8


def test_each_request_iterates_afresh() -> None:
    retries = NamespaceWatchRetries()
    assert list(retries) == list(retries) == list(NamespaceWatchRetries.FIRST)
