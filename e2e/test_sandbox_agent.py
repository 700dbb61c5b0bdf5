"""The sandbox's node agent on real tritonservers, driven by a fake API (no operator).

What a kubelet + ReplicaSet controller would do: replicas follow ``spec.replicas``,
a pod is ready only when Triton's model is, a config change rolls pods one at a
time without dropping below ``spec.replicas`` ready, scale-down removes the newest,
and status/targets follow. ~25 s.
"""

from __future__ import annotations

import asyncio
import copy
import os
from pathlib import Path
from typing import Any, Optional

import pytest

from tritonscale.render.kubernetes_objects import HASH_ANNOTATION, LABEL, config_hash
from tritonscale.sandbox import tritonserver as triton_runtime
from tritonscale.sandbox.node_agent import NodeAgent
from tritonscale.sandbox.tritonserver import cost_model_config


def _config(cost_base_ms: float) -> str:
    return cost_model_config("linear", max_batch_size=4, cost_base_ms=cost_base_ms, cost_per_item_ms=1)


class FakeCluster:
    """One Deployment + ConfigMap, and a log of every status the agent patched."""

    def __init__(self, replicas: int, config: str) -> None:
        self.config = config
        self.deployment: dict[str, Any] = {
            "metadata": {"name": "linear", "namespace": "default", "generation": 1, "labels": {LABEL: "linear"}},
            "spec": {"replicas": replicas, "template": {
                "metadata": {"annotations": {HASH_ANNOTATION: config_hash(config)}},
                "spec": {"volumes": [{"name": "model-config", "configMap": {"name": "linear-config"}}]}}},
        }
        self.statuses: list[dict[str, Any]] = []

    def set(self, replicas: Optional[int] = None, config: Optional[str] = None) -> None:
        meta = self.deployment["metadata"]
        meta["generation"] += 1
        if replicas is not None:
            self.deployment["spec"]["replicas"] = replicas
        if config is not None:
            self.config = config
            self.deployment["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION] = config_hash(config)

    def list_deployments(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.deployment)]

    def read_configmap(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        return {"data": {"config.pbtxt": self.config}} if name == "linear-config" else None

    def patch_deployment_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.statuses.append(dict(status))


async def _until(predicate, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s: {what}")


@pytest.mark.e2e
@pytest.mark.timeout(120)
def test_agent_scales_rolls_restarts_and_reports(tmp_path: Path) -> None:
    try:
        triton_runtime.find_tritonserver()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    first, second = _config(5), _config(6)
    cluster = FakeCluster(2, first)

    async def scenario() -> tuple[NodeAgent, list[int]]:
        agent = NodeAgent(cluster, tmp_path, prometheus=None, api_poll_s=0.2, drain_s=0.2)
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop))
        try:
            w = lambda: agent.workload("default", "linear")  # noqa: E731
            await _until(lambda: agent.ready_count("default", "linear") == 2, 60, "2 ready pods")
            assert [p.name for p in w().pods] == ["linear-0", "linear-1"]
            assert cluster.statuses[-1]["readyReplicas"] == 2
            assert cluster.statuses[-1]["observedGeneration"] == 1
            # Ready before Triton's model is: never (the first statuses counted 0 ready pods).
            assert cluster.statuses[0]["readyReplicas"] == 0 and cluster.statuses[0]["replicas"] == 2
            assert len(agent.endpoints("default", "linear")) == 2

            # Rollout: one pod at a time, never fewer than 2 ready.
            mark = len(cluster.statuses)
            cluster.set(config=second)
            await _until(lambda: (x := w()) is not None and len(x.pods) == 2 and all(
                p.config_hash == config_hash(second) and p.ready for p in x.pods), 60, "rolled to the new config")
            during = cluster.statuses[mark:]
            assert min(s["readyReplicas"] for s in during) >= 2, during
            assert max(s["replicas"] for s in during) <= 3, during  # maxSurge 1
            for p in w().pods:
                assert (p.process.model_repository / "linear" / "config.pbtxt").read_text() == second
            assert [p.name for p in w().pods] == ["linear-2", "linear-3"]

            # A crash: restarted in place, same name and ports.
            pod = w().pods[0]
            port = pod.process.http_port
            assert agent.kill("default", "linear") == pod.name
            await _until(lambda: pod.restarts == 1 and pod.ready, 30, "restart after a kill")
            assert pod.process.http_port == port and agent.restarts == 1

            # Scale down: the newest goes first.
            cluster.set(replicas=1)
            await _until(lambda: len(w().pods) == 1, 30, "scale down to 1")
            assert w().pods[0].name == "linear-2"
            await _until(lambda: cluster.statuses[-1]["replicas"] == 1, 5, "status shows 1 replica")
            return agent, list(agent.started_pids)
        finally:
            stop.set()
            await task
            await agent.shutdown()

    agent, pids = asyncio.run(scenario())
    assert len(pids) == 5  # 2 + 2 rolled + 1 restart
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
