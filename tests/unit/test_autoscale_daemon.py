"""The autoscaler daemon's loop, driven the way Kopf drives it, with the tick stubbed out.

Kopf's shutdown waits for every task still pending after its root tasks stop and re-raises
any that fails. So the daemon must leave behind no helper task that ends in an exception
(an `await stopped.wait(t)` did: its timer task ends with TimeoutError, which turned a
plain SIGTERM into exit code 1).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf
import pytest
from kopf._cogs.aiokits.aioenums import AsyncFlagWaiter, FlagSetter

from tritonscale.handlers import autoscale_daemon, reconciler, settings


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    seen: list[float] = []
    monkeypatch.setattr(autoscale_daemon.autoscaler, "run_tick",
                        lambda *args: seen.append(args[4]) is None)  # still there
    monkeypatch.setattr(settings, "PROMETHEUS_URL", None)
    monkeypatch.setattr(settings, "KUBE", object())
    return seen


async def _start(spec: dict[str, Any]) -> tuple[asyncio.Task[None], FlagSetter[Any]]:
    setter: FlagSetter[Any] = FlagSetter()
    stopped = AsyncFlagWaiter(setter)
    task = asyncio.create_task(autoscale_daemon.autoscale(
        stopped=stopped, namespace="ns", name="svc", uid="u1", body={"metadata": {"generation": 1}, "spec": spec},
        logger=logging.getLogger("test")))
    return task, setter


def _stub_ticks(monkeypatch: pytest.MonkeyPatch, run_tick: Any, forgotten: list[str],
                metrics: Any = lambda ns, name: f"metrics {ns}/{name}") -> None:
    """``run_tick`` for the autoscaler's tick; what the daemon forgets goes to ``forgotten``: the uid, and
    ``metrics(ns, name)`` when the metrics are (read when they are)."""
    monkeypatch.setattr(autoscale_daemon.autoscaler, "run_tick", run_tick)
    monkeypatch.setattr(autoscale_daemon.autoscaler, "forget", forgotten.append)
    monkeypatch.setattr(autoscale_daemon.om, "forget", lambda ns, name, uid=None: forgotten.append(metrics(ns, name)))
    monkeypatch.setattr(settings, "PROMETHEUS_URL", None)
    monkeypatch.setattr(settings, "KUBE", object())


def test_the_daemon_leaves_no_failing_task_for_kopfs_shutdown(ticks: list[float]) -> None:
    async def scenario() -> list[str]:
        task, setter = await _start({"scaling": {"intervalSeconds": 1}})
        while not ticks:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # into the wait between ticks
        # What Kopf's run_tasks does on exit: snapshot the pending tasks, wait, re-raise failures.
        others = asyncio.all_tasks() - {asyncio.current_task(), task}
        await asyncio.sleep(1.5)  # past the wait's deadline and into the next tick
        failed = [f"{t.get_name()}: {t.exception()!r}" for t in others
                  if t.done() and not t.cancelled() and t.exception() is not None]
        setter.set(reason=kopf.DaemonStoppingReason.OPERATOR_EXITING)
        task.cancel()
        await asyncio.wait([task], timeout=1)
        assert task.done()
        return failed

    assert _run(scenario()) == []
    assert len(ticks) >= 2  # it did wait and tick again


def test_cancelling_the_daemon_ends_its_wait_at_once(ticks: list[float]) -> None:
    async def scenario() -> bool:
        task, setter = await _start({"scaling": {"intervalSeconds": 600}})
        while not ticks:
            await asyncio.sleep(0.01)
        setter.set(reason=kopf.DaemonStoppingReason.OPERATOR_EXITING)
        task.cancel()  # Kopf: the flag, then (no cancellation_backoff) the cancellation
        await asyncio.wait([task], timeout=5)  # against a 600 s wait
        return task.done()

    assert _run(scenario())
    assert len(ticks) == 1


def test_a_daemon_kopfs_killer_never_stops_ends_when_the_operator_stops(ticks: list[float], monkeypatch) -> None:
    """Kopf may spawn a daemon while it stops (an event handled after its daemon killer ran): nothing sets
    that daemon's flag, and Kopf waited 5 s for it before cancelling it (the Lease went back 5 s late in a
    CI run). The operator's cleanup handler ends its wait between ticks, and one spawned after it returns
    before its first tick."""
    monkeypatch.setattr(autoscale_daemon, "_STOP_EVENTS", {})

    async def scenario() -> tuple[bool, int, bool, int]:
        task, _ = await _start({"scaling": {"intervalSeconds": 600}})  # its flag is never set
        while not ticks:
            await asyncio.sleep(0.01)
        await autoscale_daemon._operator_stopping()
        await asyncio.wait([task], timeout=5)  # against a 600 s wait
        first, seen = task.done(), len(ticks)
        late, _ = await _start({"scaling": {"intervalSeconds": 600}})
        await asyncio.wait([late], timeout=5)
        return first, seen, late.done(), len(ticks)

    first, seen, late, after = _run(scenario())
    assert first and seen == 1
    assert late and after == 1  # no tick from the daemon spawned during the stop


def test_the_daemon_reconciles_its_object_again_every_resync_period(ticks: list[float], monkeypatch) -> None:
    """Kopf never retries a child's event handler: a correction that failed waits for this resync
    (RESYNC_S), run from the object's own daemon between ticks -- and a failing one is a line, not
    the end of the loop."""
    resyncs: list[tuple[str, str]] = []

    def reconcile_owner(namespace: str, name: str) -> None:
        resyncs.append((namespace, name))
        if len(resyncs) == 1:
            raise RuntimeError("the API server went away")

    monkeypatch.setattr(autoscale_daemon, "_reconcile_owner", reconcile_owner)
    monkeypatch.setattr(autoscale_daemon, "RESYNC_S", 1.5)

    async def scenario() -> None:
        task, setter = await _start({"scaling": {"intervalSeconds": 1}})
        # until the second resync has run (it runs after a tick, in a thread: stopping at the fifth
        # tick raced it), or long enough that it should have
        while len(ticks) < 5 or (len(resyncs) < 2 and len(ticks) < 10):
            await asyncio.sleep(0.05)
        setter.set(reason=kopf.DaemonStoppingReason.OPERATOR_EXITING)
        task.cancel()
        await asyncio.wait([task], timeout=1)

    _run(scenario())
    assert resyncs[:2] == [("ns", "svc"), ("ns", "svc")]  # the first failed; the loop went on
    assert len(resyncs) < len(ticks)  # every RESYNC_S, not every tick


def test_the_daemon_ends_and_forgets_its_object_once_it_is_gone(monkeypatch) -> None:
    """No finalizer holds a deleted InferenceService for Kopf to stop its daemon first
    (``autoscale_daemon._without_finalizer``): the daemon's own tick finds it gone, or replaced by another
    of its name, and the loop ends with the object's memory and metrics dropped."""
    calls: list[tuple] = []
    forgotten: list[str] = []
    _stub_ticks(monkeypatch, lambda *args: calls.append(args) or len(calls) < 2, forgotten)

    async def scenario() -> bool:
        task, _ = await _start({"scaling": {"intervalSeconds": 1}})
        await asyncio.wait([task], timeout=5)
        return task.done()

    assert _run(scenario())  # ended by itself, not stopped by Kopf
    assert len(calls) == 2 and all(c[-1] == "u1" for c in calls)  # each tick checks the object's uid
    assert forgotten == ["u1", "metrics ns/svc"]


def test_the_daemon_ends_when_the_watch_sees_its_object_deleted_though_reads_are_refused(monkeypatch) -> None:
    """Deleting a namespace watched through a Role (watchNamespaces) takes the Role too: every read there is a
    403, not the 404 that ends the loop, so it ran on, failing each tick and exporting the gone service's
    metrics (TritonscaleBelowWarmFloor fired) until a restart. The watch's DELETED event ends it."""
    from kubernetes.client.exceptions import ApiException

    calls: list[tuple] = []
    forgotten: list[str] = []

    def refused(*args: Any) -> bool:
        calls.append(args)
        raise ApiException(status=403, reason="Forbidden")

    _stub_ticks(monkeypatch, refused, forgotten)

    async def scenario() -> tuple[bool, int]:
        task, _ = await _start({"scaling": {"intervalSeconds": 30}})
        while not calls:
            await asyncio.sleep(0.01)
        await asyncio.wait([task], timeout=1.5)
        assert not task.done()  # a refused tick is a failure to hold on, not an end
        await autoscale_daemon.note_deletion(event={"type": "MODIFIED"}, body={"metadata": {"uid": "u1"}})
        await asyncio.wait([task], timeout=1.5)
        assert not task.done()
        await autoscale_daemon.note_deletion(event={"type": "DELETED"}, body={"metadata": {"uid": "u1"}})
        await asyncio.wait([task], timeout=autoscale_daemon.EDIT_POLL_S + 1.0)  # within the wait, not at the next tick
        return task.done(), len(calls)

    done, ticked = _run(scenario())
    assert done and ticked == 1
    assert forgotten == ["u1", "metrics ns/svc"]
    assert not autoscale_daemon._looping and not autoscale_daemon._deleted  # nothing kept of it
    _run(autoscale_daemon.note_deletion(event={"type": "DELETED"},
                                        body={"metadata": {"uid": "u2"}}))  # no loop of its own
    assert not autoscale_daemon._deleted


def test_the_daemon_holds_no_finalizer_on_its_objects() -> None:
    """Kopf's daemons require a finalizer, fixed; the operator's is replaced in the registry so that
    none is put on an InferenceService (the real control plane's check: test_operator_lifecycle)."""
    (daemon,) = [h for h in kopf.get_default_registry()._spawning.get_all_handlers()
                 if h.fn is autoscale_daemon.autoscale]
    assert daemon.requires_finalizer is False


def test_a_name_conflict_is_retried_ever_less_often() -> None:
    """Kopf logs and posts every retry; a conflict nobody resolves said so every 30 s forever."""
    assert [reconciler.retry_delay(r, reconciler.CONFLICT_RETRY_S) for r in range(6)] == [
        30.0, 60.0, 120.0, 240.0, 300.0, 300.0]
    assert reconciler.retry_delay(10_000, reconciler.CONFLICT_RETRY_S) == reconciler.CONFLICT_RETRY_MAX_S
    assert [reconciler.retry_delay(r, reconciler.API_RETRY_S) for r in range(8)] == [
        5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]


def test_a_failure_that_goes_on_is_said_once_and_its_end_too(monkeypatch, caplog) -> None:
    """An API server gone for a minute failed every tick with the same error: one WARNING when it
    starts (another when the failure changes), DEBUG while it goes on, one INFO when ticks work again
    (it was a warning per tick, 200 lines a minute with urllib3's retries)."""
    import urllib3

    outcomes = ["refused", "refused", "refused", "timeout", "ok", "ok"]

    def tick(*_args: Any) -> bool:
        what = outcomes.pop(0) if outcomes else "ok"
        if what == "refused":
            raise urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: refused")
        if what == "timeout":
            raise urllib3.exceptions.ReadTimeoutError(None, "/x", "Read timed out. (read timeout=30)")
        return True
    monkeypatch.setattr(autoscale_daemon.autoscaler, "run_tick", tick)
    monkeypatch.setattr(settings, "PROMETHEUS_URL", None)
    monkeypatch.setattr(settings, "KUBE", object())
    monkeypatch.setattr(autoscale_daemon.asyncio, "sleep", _no_wait(asyncio.sleep))

    async def scenario() -> None:
        task, setter = await _start({"scaling": {"intervalSeconds": 1}})
        while outcomes:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        setter.set(reason=kopf.DaemonStoppingReason.OPERATOR_EXITING)
        task.cancel()
        await asyncio.wait([task], timeout=1)

    with caplog.at_level(logging.DEBUG, logger="test"):
        _run(scenario())
    said = [(r.levelname, r.getMessage().split(" (", 1)[0]) for r in caplog.records if r.name == "test"]
    failed = "autoscaler tick failed"
    assert said == [("WARNING", failed), ("DEBUG", failed), ("DEBUG", failed),  # refused, three times
                    ("WARNING", failed),  # then a timeout: another failure, said again
                    ("INFO", "autoscaler ticks again")], said


def _no_wait(sleep: Any) -> Any:
    """asyncio.sleep for the daemon's wait between ticks: a moment, not an interval."""
    async def short(delay: float) -> None:
        await sleep(min(delay, 0.001))
    return short


class _Gone:
    """A Kube whose InferenceService is found (or not) as given."""

    def __init__(self, found: dict | None) -> None:
        self.found = found

    def get_inference_service(self, namespace: str, name: str) -> dict | None:
        return self.found


@pytest.mark.parametrize(("found", "quiet"), [
    (None, True),  # deleted while the pass ran
    ({"metadata": {"uid": "new"}}, True),  # deleted and created again
    ({"metadata": {"uid": "u1"}}, False),  # still there: a child vanished, Kopf tries again
])
def test_a_pass_whose_object_was_deleted_meanwhile_ends_quietly(monkeypatch, found: dict | None, quiet: bool) -> None:
    """Found by an exploratory test: deleted and applied again in a loop, each pass's status patch met a
    404 and Kopf logged "Handler 'reconcile_inference_service' failed temporarily" at ERROR."""
    import kopf
    from kubernetes.client import ApiException

    def refused(*_: object) -> None:
        raise ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(reconciler, "reconcile", refused)
    monkeypatch.setattr(settings, "KUBE", _Gone(found))
    body = {"metadata": {"namespace": "ns", "name": "x", "uid": "u1"}}
    if quiet:
        assert reconciler.reconcile_inference_service(body) is None
    else:
        with pytest.raises(kopf.TemporaryError):
            reconciler.reconcile_inference_service(body)


@pytest.mark.parametrize("reason", [kopf.DaemonStoppingReason.RESOURCE_DELETED,
                                    kopf.DaemonStoppingReason.OPERATOR_EXITING])
def test_a_daemon_kopf_cancels_mid_tick_forgets_its_object_after_that_tick(monkeypatch, reason) -> None:
    """Kopf cancels the daemon of an object whose deletion is under way (a foreground deletion, Argo CD's
    prune, another finalizer) while its tick's thread may be running, and a thread cannot be stopped:
    the tick went on and published the gone object's metrics again after the daemon had forgotten them,
    for good (session 83's audit). At a deletion they are forgotten once that tick is done; when the
    operator stops, nothing is forgotten."""
    import threading

    in_tick, release = threading.Event(), threading.Event()
    done: list[str] = []
    forgotten: list[str] = []

    def run_tick(*args: Any) -> bool:
        in_tick.set()
        release.wait(5)
        done.append("published")  # what the real tick does last: om.publish
        return True

    _stub_ticks(monkeypatch, run_tick, forgotten, lambda ns, name: f"metrics after {done}")

    async def scenario() -> None:
        task, setter = await _start({"scaling": {"intervalSeconds": 1}})
        while not in_tick.is_set():
            await asyncio.sleep(0.01)
        setter.set(reason=reason)  # Kopf's stop_daemons: the reason, then the cancellation
        task.cancel()
        await asyncio.wait([task], timeout=1)
        assert task.done()
        assert forgotten == []  # not while the tick runs on
        release.set()
        for _ in range(100):
            if done and (forgotten or reason is not kopf.DaemonStoppingReason.RESOURCE_DELETED):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)

    _run(scenario())
    assert done == ["published"]
    if reason is kopf.DaemonStoppingReason.RESOURCE_DELETED:
        assert forgotten == ["u1", "metrics after ['published']"]
    else:
        assert forgotten == []
