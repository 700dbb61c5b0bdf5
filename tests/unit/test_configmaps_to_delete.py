"""reconcile: one immutable ConfigMap per config.pbtxt (NAME-config-HASH); those no pod template mounts
any more -- neither the Deployment's nor one of the ReplicaSets it keeps as history -- are deleted."""

from __future__ import annotations

from typing import Any

import pytest

from tritonscale.reconcile.child_refusals import holds_other_content
from tritonscale.reconcile.inference_service import configmaps_to_delete

UID = "6f1c9a2e-3b7d-4f55-9e0a-1c2d3e4f5a6b"


def cm(name: str, uid: str | None = UID) -> dict[str, Any]:
    refs = [] if uid is None else [{"uid": uid, "kind": "InferenceService", "name": "linear"}]
    return {"metadata": {"name": name, "uid": f"cm-{name}", "ownerReferences": refs}}


def workload(config: str | None) -> dict[str, Any]:
    volumes = [{"name": "model-repository", "emptyDir": {}}]
    if config is not None:
        volumes.append({"name": "model-config", "configMap": {"name": config}})
    return {"spec": {"template": {"spec": {"volumes": volumes}}}}


def names(out: list[dict[str, Any]]) -> list[str]:
    return [c["metadata"]["name"] for c in out]


def test_what_a_template_mounts_stays_and_the_rest_goes() -> None:
    configmaps = [cm("linear-config-aaa"), cm("linear-config-bbb"), cm("linear-config-ccc"), cm("linear-config")]
    history = [workload("linear-config-bbb"), workload("linear-config-aaa")]  # the ReplicaSets kept
    assert names(configmaps_to_delete(configmaps, [workload("linear-config-ccc"), *history], UID)) == [
        "linear-config"]  # an older operator's single ConfigMap, once no ReplicaSet mounts it


def test_the_deployment_s_configs_stay_before_their_replica_sets_exist() -> None:
    """Just patched: the Deployment controller has not made the new ReplicaSet yet -- nor, after two
    edits in a row, the one of the template as it was before this pass."""
    configmaps = [cm("linear-config-old"), cm("linear-config-new")]
    assert names(configmaps_to_delete(configmaps, [workload("linear-config-new"), workload("linear-config-old")],
                                      UID)) == []
    assert names(configmaps_to_delete(configmaps, [workload("linear-config-new")], UID)) == ["linear-config-old"]


def test_only_the_owner_s_own_configmaps_are_candidates() -> None:
    """A ConfigMap that carries the label but another owner's uid, or none, is someone else's."""
    configmaps = [cm("linear-config-x", uid="someone-else"), cm("linear-config-y", uid=None)]
    assert configmaps_to_delete(configmaps, [workload("linear-config-z")], UID) == []


def test_a_replica_set_without_the_volume_protects_nothing() -> None:
    configmaps = [cm("linear-config-aaa")]
    assert names(configmaps_to_delete(configmaps, [workload("linear-config-bbb"), workload(None)], UID)) == [
        "linear-config-aaa"]


def test_a_clean_up_refused_at_every_pass_is_one_warning(caplog) -> None:
    """A new operator under an older chart's RBAC (no ReplicaSet list): one warning per service, not
    one per child event (57 lines in 2 s for four services), and again once it changes or clears."""
    from kubernetes.client import ApiException

    from tritonscale.reconcile import inference_service as isvc

    class Kube:
        def list_config_maps(self, ns: str, selector: str) -> list[dict[str, Any]]:
            return [cm("linear-config-old"), cm("linear-config-new")]

        def list_replica_sets(self, ns: str, selector: str) -> list[dict[str, Any]]:
            raise ApiException(status=403, reason="Forbidden")

    isvc._cleanup_failed.clear()
    with caplog.at_level("WARNING", logger="tritonscale"):
        for _ in range(5):
            isvc._delete_unmounted_configmaps(Kube(), {"metadata": {"namespace": "ns", "name": "linear", "uid": UID}},  # type: ignore[arg-type]
                                              [workload("linear-config-new")], isvc.Outcome(valid=True))
    assert [r.getMessage() for r in caplog.records] == [
        "ns/linear: removing ConfigMaps no pod mounts failed (they stay): 403 Forbidden"]
    isvc._cleanup_failed.clear()


def test_an_object_made_again_under_the_name_says_the_refusal_again_and_a_deleted_one_is_forgotten(caplog) -> None:
    """Keyed by uid: the replacement's first refusal is a WARNING, not muted as the old one's (session 85's
    churn audit: WARNING then DEBUG); and the deleted object's entry goes (3001 entries after 3000)."""
    from kubernetes.client import ApiException

    from tritonscale.reconcile import inference_service as isvc

    class Kube:
        uid = ""

        def list_config_maps(self, ns: str, selector: str) -> list[dict[str, Any]]:
            return [cm("linear-config-old", self.uid), cm("linear-config-new", self.uid)]

        def list_replica_sets(self, ns: str, selector: str) -> list[dict[str, Any]]:
            raise ApiException(status=403, reason="Forbidden")

    isvc._cleanup_failed.clear()
    with caplog.at_level("DEBUG", logger="tritonscale"):
        for uid in ("uid-old", "uid-new"):
            kube = Kube()
            kube.uid = uid
            isvc._delete_unmounted_configmaps(kube, {"metadata": {"namespace": "ns", "name": "linear", "uid": uid}},  # type: ignore[arg-type]
                                              [workload("linear-config-new")], isvc.Outcome(valid=True))
    assert [r.levelname for r in caplog.records if "removing ConfigMaps" in r.getMessage()] == [
        "WARNING", "WARNING"]
    isvc.forget_deleted("uid-old")
    isvc.forget_deleted("uid-new")
    assert isvc._cleanup_failed == {}


def _orphan(labels: dict[str, str], refs: list[dict[str, Any]] | None = None, record: bool = True) -> dict[str, Any]:
    annotations = {"tritonscale.io/last-applied": "{}"} if record else {}
    return {"metadata": {"name": "linear-config-old", "uid": "cm-old", "labels": labels, "ownerReferences": refs,
                         "annotations": annotations}}


OURS = {"tritonscale.io/inferenceservice": "linear", "app.kubernetes.io/managed-by": "tritonscale"}


def test_an_orphan_of_the_objects_own_is_adoptable_and_nothing_else_is() -> None:
    """Left by `kubectl delete tis --cascade=orphan`: no owner, the object's own labels."""
    from tritonscale.reconcile.inference_service import adoptable

    assert adoptable(_orphan(OURS), "linear")
    assert adoptable(_orphan(OURS, [{"uid": "x", "kind": "Team", "controller": False}]), "linear")
    assert not adoptable(_orphan(OURS), "other")  # another object's
    assert not adoptable(_orphan({**OURS, "app.kubernetes.io/managed-by": "helm"}), "linear")
    assert not adoptable(_orphan({"tritonscale.io/inferenceservice": "linear"}), "linear")
    assert not adoptable(_orphan(OURS, [{"uid": "x", "kind": "InferenceService", "controller": True}]), "linear")
    assert not adoptable(_orphan(OURS, record=False), "linear")  # `tritonscale render`'s output, applied by hand


def test_an_orphaned_config_no_template_mounts_goes_too() -> None:
    """An orphaned Deployment's earlier configs, once adopted and unmounted, are nobody's to keep."""
    out = configmaps_to_delete([_orphan(OURS), cm("linear-config-aaa")], [workload("linear-config-aaa")], UID)
    assert names(out) == ["linear-config-old"]


def config(data: dict[str, str] | None, immutable: bool | None = True, binary: dict[str, str] | None = None,
           kind: str = "ConfigMap") -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind, "metadata": {"name": "linear-config-aaa"}}
    if data is not None:
        out["data"] = data
    if binary is not None:
        out["binaryData"] = binary
    if immutable is not None:
        out["immutable"] = immutable
    return out


@pytest.mark.parametrize(("live", "replaced"), [
    (None, False),  # not there: created
    (config({"config.pbtxt": "max_batch_size: 8"}), False),  # as rendered
    (config({"config.pbtxt": "max_batch_size: 64"}), True),  # replaced by hand: no patch can put it back
    (config({"config.pbtxt": "max_batch_size: 8", "extra": "x"}), True),  # a key added
    (config(None), True),  # its data removed
    (config({"config.pbtxt": "max_batch_size: 8"}, binary={"blob": "AA=="}), True),  # binaryData added
    (config({"config.pbtxt": "max_batch_size: 64"}, immutable=False), False),  # mutable: a patch puts it back
    (config({"config.pbtxt": "max_batch_size: 64"}, immutable=None), False),
])
def test_an_immutable_configmap_with_other_content_is_replaced(live: dict[str, Any] | None, replaced: bool) -> None:
    desired = config({"config.pbtxt": "max_batch_size: 8"})
    assert holds_other_content(desired, live) is replaced


def test_only_a_configmap_is_replaced() -> None:
    """A Service or a Deployment is patched back; only a ConfigMap can be immutable."""
    live = config({"config.pbtxt": "max_batch_size: 64"}, kind="Service")
    assert not holds_other_content(config({"config.pbtxt": "max_batch_size: 8"}, kind="Service"), live)
