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
from tritonscale.reconcile.upgrade_rollouts import UpgradeGate, is_upgrade, rolling


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


def test_rolling_counts_templates_rolling_out_besides_ones_own():
    deps = [
        _dep("a", "done"),
        _dep("a", "old-pods", replicas=3, updated=1),        # pods of an earlier template remain
        _dep("b", "just-written", generation=3, observed=2),  # the controller has not acted on the write
        _dep("b", "me", replicas=3, updated=1),
        _dep("b", "scaling-up", replicas=4, updated=4),       # a scale-up makes pods of the current template
    ]
    assert rolling(deps, "b/me", __version__) == ["a/old-pods", "b/just-written"]


def test_a_paused_rollout_and_one_stuck_from_before_the_upgrade_hold_no_place():
    deps = [
        _dep("a", "paused", replicas=3, updated=0, paused=True),            # makes no surge pod
        _dep("a", "broken-before", replicas=3, updated=1, version="0.1.0", stuck=True),
        _dep("a", "broken-by-this-version", replicas=3, updated=1, stuck=True),  # the upgrade stops here
        _dep("a", "rolling-older", replicas=3, updated=1, version="0.1.0"),  # a spec edit under the old one
    ]
    assert rolling(deps, "a/me", __version__) == ["a/broken-by-this-version", "a/rolling-older"]


class FakeLister:
    def __init__(self, by_namespace: dict[str | None, list[dict[str, Any]]]):
        self.by_namespace = by_namespace
        self.calls: list[tuple[str | None, str]] = []

    def list_deployments(self, namespace, label_selector):
        self.calls.append((namespace, label_selector))
        return self.by_namespace.get(namespace, [])


def test_the_gate_admits_below_the_limit_and_names_what_it_waits_for():
    busy = [_dep("a", "x", replicas=3, updated=1), _dep("a", "y", generation=5, observed=4)]
    kube = FakeLister({None: busy})
    with UpgradeGate(max_rollouts=3).admit(kube, "a", "z") as waiting:
        assert waiting == []                     # two rolling, three allowed
    with UpgradeGate(max_rollouts=2).admit(kube, "a", "z") as waiting:
        assert waiting == ["a/x", "a/y"]
    with UpgradeGate(max_rollouts=2).admit(kube, "a", "x") as waiting:
        assert waiting == []                     # its own rollout does not count
    assert kube.calls[0] == (None, "app.kubernetes.io/managed-by=tritonscale")  # cluster-wide, ours only


def test_no_limit_lists_nothing():
    kube = FakeLister({})
    with UpgradeGate(max_rollouts=0).admit(kube, "a", "z") as waiting:
        assert waiting == []
    assert kube.calls == []


def test_a_namespaced_operator_lists_each_watched_namespace():
    kube = FakeLister({"a": [_dep("a", "x", replicas=3, updated=1)], "b": []})
    with UpgradeGate(max_rollouts=1, namespaces=("a", "b")).admit(kube, "b", "z") as waiting:
        assert waiting == ["a/x"]
    assert [ns for ns, _ in kube.calls] == ["a", "b"]


def test_the_gate_holds_its_lock_while_the_admitted_pass_writes():
    """A second pass lists only once the first has written its Deployment (the block ends), so it sees
    that rollout and cannot take the same place."""
    gate = UpgradeGate(max_rollouts=1)
    written: list[dict[str, Any]] = []
    kube = FakeLister({})
    kube.list_deployments = lambda ns, sel: list(written)  # type: ignore[method-assign]
    inside, second = threading.Event(), []

    def other() -> None:
        with gate.admit(kube, "a", "two") as waiting:
            second.append(waiting)

    with gate.admit(kube, "a", "one") as waiting:
        assert waiting == []
        t = threading.Thread(target=other)
        t.start()
        inside.wait(0.2)
        assert second == []                      # blocked on the lock
        written.append(_dep("a", "one", generation=3, observed=2))
    t.join(5)
    assert second == [["a/one"]]


def test_the_message_names_the_rollouts_and_the_limit():
    text = ur.waiting_message([f"ns/f{i}" for i in range(7)], 1, "9.9.9")
    assert "(9.9.9)" in text and "fewer than 1 other fleet(s)" in text and "--max-upgrade-rollouts" in text
    assert "ns/f0, ns/f1, ns/f2, ns/f3, ns/f4 and 2 more" in text


def test_the_cli_default_is_the_modules():
    args = build_parser().parse_args(["run"])
    assert args.max_upgrade_rollouts == ur.DEFAULT_MAX_ROLLOUTS
