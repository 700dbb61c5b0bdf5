"""reconcile/upgrade_rollouts.py: an operator upgrade's new pod template rolls a few fleets at a time."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from support.rendered import children, triton
from support.spec_cases import base_spec
from tritonscale import __version__
from tritonscale.api.spec import RENDERED_BY_ANNOTATION
from tritonscale.cli import build_parser
from tritonscale.reconcile import upgrade_rollouts as ur
from tritonscale.reconcile.upgrade_rollouts import UpgradeGate, holds_a_place, is_upgrade


def _doc() -> dict[str, Any]:
    return {"apiVersion": "tritonscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "linear", "namespace": "default"}, "spec": base_spec()}


def _deployment() -> dict[str, Any]:
    return children(_doc())["Deployment"]


def _older(dep: dict[str, Any], version: str | None = "0.1.0", args_dropped: int = 1) -> dict[str, Any]:
    """``dep`` as an older operator would have left it: another version (None: before the annotation)
    and a pod template without its last ``args_dropped`` flags."""
    old = copy.deepcopy(dep)
    annotations = old["metadata"]["annotations"]
    annotations.pop(RENDERED_BY_ANNOTATION)
    if version is not None:
        annotations[RENDERED_BY_ANNOTATION] = version
    container = triton(old)
    container["args"] = container["args"][:len(container["args"]) - args_dropped]
    return old


def test_the_deployment_records_the_version_that_rendered_it():
    assert ur.rendered_by(_deployment()) == __version__


@pytest.mark.parametrize(("version", "args_dropped", "spec_unchanged", "writers", "upgrade"), [
    ("0.1.0", 1, True, [], True),           # another version, a new template, the spec as applied
    (None, 1, True, [], True),              # a version before the annotation
    (__version__, 1, True, [], False),      # this version's own change (the tuner's batcher, say)
    ("0.1.0", 0, True, [], False),          # the same template: a metadata patch, no rollout
    ("0.1.0", 1, False, [], False),         # the spec was edited: it rolls at once, with the new rendering
    ("0.1.0", 1, True, ["kubectl-edit"], False),  # someone else's edit undone: not the upgrade's
])
def test_is_upgrade(version, args_dropped, spec_unchanged, writers, upgrade):
    desired = _deployment()
    live = _older(desired, version, args_dropped)
    assert is_upgrade(live, desired, __version__, spec_unchanged, writers) is upgrade


def test_the_api_servers_defaults_in_the_live_template_are_no_change():
    desired = _deployment()
    live = _older(desired, "0.1.0", 0)
    live["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    triton(live)["terminationMessagePath"] = "/dev/termination-log"
    assert not is_upgrade(live, desired, __version__, True, [])


def _dep(ns: str, name: str, generation: int = 2, observed: int = 2, replicas: int = 2,
         updated: int = 2, version: str = __version__, paused: bool = False, stuck: bool = False) -> dict[str, Any]:
    dep: dict[str, Any] = {
        "metadata": {"namespace": ns, "name": name, "generation": generation,
                     "annotations": {RENDERED_BY_ANNOTATION: version}},
        "spec": {"paused": True} if paused else {},
        "status": {"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated}}
    if stuck:
        dep["status"]["conditions"] = [{"type": "Progressing", "status": "False",
                                        "reason": "ProgressDeadlineExceeded"}]
    return dep


def _holding(deps: list[dict[str, Any]]) -> list[str]:
    return [ur.ref(d) for d in deps if holds_a_place(d, __version__)]


def test_a_template_rolling_out_holds_a_place():
    deps = [
        _dep("a", "done"),
        _dep("a", "old-pods", replicas=3, updated=1),        # pods of an earlier template remain
        _dep("b", "just-written", generation=3, observed=2),  # the controller has not acted on the write
        _dep("b", "scaling-up", replicas=4, updated=4),       # a scale-up makes pods of the current template
    ]
    assert _holding(deps) == ["a/old-pods", "b/just-written"]


def test_a_paused_rollout_and_one_stuck_from_before_the_upgrade_hold_no_place():
    deps = [
        _dep("a", "paused", replicas=3, updated=0, paused=True),            # makes no surge pod
        _dep("a", "broken-before", replicas=3, updated=1, version="0.1.0", stuck=True),
        _dep("a", "broken-by-this-version", replicas=3, updated=1, stuck=True),  # the upgrade stops here
        _dep("a", "rolling-older", replicas=3, updated=1, version="0.1.0"),  # a spec edit under the old one
    ]
    assert _holding(deps) == ["a/broken-by-this-version", "a/rolling-older"]


class FakeLister:
    def __init__(self, by_namespace: dict[str | None, list[dict[str, Any]]]):
        self.by_namespace = by_namespace
        self.calls: list[tuple[str | None, str]] = []

    def list_deployments(self, namespace, label_selector):
        self.calls.append((namespace, label_selector))
        return self.by_namespace.get(namespace, [])


def test_the_gate_admits_below_the_limit_and_names_what_it_waits_for():
    busy = [_dep("a", "x", replicas=3, updated=1), _dep("a", "y", generation=5, observed=4), _dep("a", "z")]
    assert UpgradeGate(max_rollouts=3).admit(FakeLister({None: busy}), "a", "z", 2, now=0.0) == []
    assert UpgradeGate(max_rollouts=2).admit(FakeLister({None: busy}), "a", "z", 2, now=0.0) == ["a/x", "a/y"]
    # its own rollout does not count
    assert UpgradeGate(max_rollouts=2).admit(FakeLister({None: busy}), "a", "x", 2, now=0.0) == []
    kube = FakeLister({None: busy})
    UpgradeGate().admit(kube, "a", "z", 2, now=0.0)
    assert kube.calls == [(None, "app.kubernetes.io/managed-by=tritonscale")]  # cluster-wide, ours only


def test_no_limit_lists_nothing():
    kube = FakeLister({})
    assert UpgradeGate(max_rollouts=0).admit(kube, "a", "z", 1) == []
    assert kube.calls == []


def test_a_namespaced_operator_lists_each_watched_namespace():
    kube = FakeLister({"a": [_dep("a", "x", replicas=3, updated=1)], "b": []})
    assert UpgradeGate(max_rollouts=1, namespaces=("a", "b")).admit(kube, "b", "z", 1, now=0.0) == ["a/x"]
    assert [ns for ns, _ in kube.calls] == ["a", "b"]


def test_after_the_first_list_the_watch_keeps_the_count():
    """One list, then events: 1,000 waiting fleets made 1,000 lists of every Deployment at a restart."""
    kube = FakeLister({None: [_dep("a", "x", replicas=3, updated=1)]})
    gate = UpgradeGate(max_rollouts=1)
    assert gate.admit(kube, "a", "z", 1, now=0.0) == ["a/x"]
    assert gate.observe(_dep("a", "x")) is True                 # x's rollout ended: a place is free
    assert gate.admit(kube, "a", "z", 1, now=1.0) == []         # z takes it
    assert gate.admit(kube, "a", "w", 1, now=2.0) == ["a/z"]    # z holds it before its write's event
    assert len(kube.calls) == 1


def test_an_admitted_rollout_holds_its_place_until_the_watch_shows_its_write():
    gate = UpgradeGate(max_rollouts=1)
    kube = FakeLister({})
    assert gate.admit(kube, "a", "z", 4, now=0.0) == []         # the write takes z to generation 5
    assert gate.observe(_dep("a", "z", generation=4, observed=4)) is False  # an event from before the write
    assert gate.admit(kube, "a", "w", 1, now=1.0) == ["a/z"]
    assert gate.observe(_dep("a", "z", generation=5, observed=4)) is False  # the write: rolling
    assert gate.admit(kube, "a", "w", 1, now=2.0) == ["a/z"]
    assert gate.observe(_dep("a", "z", generation=5, observed=5)) is True   # done
    assert gate.admit(kube, "a", "w", 1, now=3.0) == []


def test_an_admission_the_watch_never_confirms_lets_go():
    gate = UpgradeGate(max_rollouts=1)
    kube = FakeLister({})
    assert gate.admit(kube, "a", "z", 1, now=0.0) == []         # its write failed: no event comes
    assert gate.admit(kube, "a", "w", 1, now=ur.ADMITTED_TTL_S - 1) == ["a/z"]
    assert gate.admit(kube, "a", "w", 1, now=ur.ADMITTED_TTL_S + 1) == []


def test_a_deletion_ends_a_rollout_and_a_relist_forgets_one_the_watch_missed():
    kube = FakeLister({None: [_dep("a", "x", replicas=3, updated=1), _dep("a", "y", replicas=3, updated=1)]})
    gate = UpgradeGate(max_rollouts=1)
    assert gate.admit(kube, "a", "z", 1, now=0.0) == ["a/x", "a/y"]
    assert gate.observe(_dep("a", "x", replicas=3, updated=1), deleted=True) is True
    kube.by_namespace = {None: []}                              # y went while the watch was down
    assert gate.admit(kube, "a", "z", 1, now=ur.RELIST_S - 1) == ["a/y"]
    assert gate.admit(kube, "a", "z", 1, now=ur.RELIST_S) == []


def test_events_of_deployments_that_never_held_a_place_free_none():
    gate = UpgradeGate()
    assert gate.observe(_dep("a", "steady")) is False           # a scale, a pod ready: no rollout
    assert gate.observe(_dep("a", "steady"), deleted=True) is False


def test_two_passes_cannot_take_the_last_place():
    """Passes of different InferenceServices run in Kopf's threads at once: the admission is recorded
    under the lock that counts, so exactly one of many concurrent passes goes."""
    gate = UpgradeGate(max_rollouts=1)
    kube = FakeLister({})
    results: dict[str, list[str]] = {}
    start = threading.Barrier(8)

    def ask(name: str) -> None:
        start.wait()
        results[name] = gate.admit(kube, "a", name, 1)

    threads = [threading.Thread(target=ask, args=(f"f{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert sum(1 for waiting in results.values() if waiting == []) == 1


def test_the_message_names_the_rollouts_and_the_limit():
    text = ur.waiting_message([f"ns/f{i}" for i in range(7)], 1, "9.9.9")
    assert "(9.9.9)" in text and "fewer than 1 other fleet(s)" in text and "--max-upgrade-rollouts" in text
    assert "ns/f0, ns/f1, ns/f2, ns/f3, ns/f4 and 2 more" in text


def test_the_cli_default_is_the_modules():
    args = build_parser().parse_args(["run"])
    assert args.max_upgrade_rollouts == ur.DEFAULT_MAX_ROLLOUTS


def test_has_room_counts_what_the_gate_knows():
    gate = UpgradeGate(max_rollouts=1)
    assert gate.has_room()                                        # nothing known held
    assert gate.admit(FakeLister({}), "a", "z", 1, now=0.0) == []
    assert not gate.has_room(now=1.0)                             # z's admission holds the place
    assert UpgradeGate(max_rollouts=0).has_room()                 # no limit
    # an admission past its TTL holds no place here either, as in admit (the wake-up asks this first)
    assert gate.has_room(now=ur.ADMITTED_TTL_S + 1)
