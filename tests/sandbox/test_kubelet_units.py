"""The sandbox kubelet's pure parts, checked against what Kubernetes v1.35 does:
pod phase and conditions, the CrashLoopBackOff timing, container args and paths
mapped onto volumes and host ports, kube-proxy's endpoint choice, the pod network,
probe specs and the Node's resources."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonscale.sandbox.containers import RestartBackoff, container_env, map_args
from tritonscale.sandbox.node_registration import GPU, machine_resources, node_object
from tritonscale.sandbox.pod_network import PodNetwork, node_pod_cidr
from tritonscale.sandbox.pod_status import (
    ContainerRecord,
    conditions,
    exit_code,
    phase,
    pod_status,
    running_state,
    terminated_state,
)
from tritonscale.sandbox.pod_volumes import Mount, rewrite_paths
from tritonscale.sandbox.probes import ProbeSpec
from tritonscale.sandbox.service_routing import pick_endpoints

# --------------------------------------------------------------------------- status


def _rec(state: dict, ready: bool = False, last_state: dict | None = None) -> ContainerRecord:
    r = ContainerRecord("triton", "img", state=state, ready=ready, started=ready)
    r.last_state = last_state or {}
    return r


WAITING = {"waiting": {"reason": "PodInitializing"}}
RUNNING = running_state(100.0)
DONE = terminated_state(0, 100.0, 110.0, "sandbox://1")
CRASHED = terminated_state(137, 100.0, 110.0, "sandbox://1")


@pytest.mark.parametrize("initialized, containers, deleting, expected", [
    (False, [_rec(WAITING)], False, "Pending"),            # init containers still running
    (True, [_rec({"waiting": {"reason": "ContainerCreating"}})], False, "Pending"),  # never ran yet
    (True, [_rec(RUNNING)], False, "Running"),             # running, ready or not
    (True, [_rec(CRASHED)], False, "Running"),             # exited, about to restart (Always)
    (True, [_rec({"waiting": {"reason": "CrashLoopBackOff"}}, last_state=CRASHED)], False, "Running"),
    (True, [_rec(DONE)], True, "Succeeded"),               # deleted, exited 0 on SIGTERM
    (True, [_rec(CRASHED)], True, "Failed"),               # deleted, had to be SIGKILLed
    (True, [_rec(RUNNING)], True, "Running"),              # deleted, still within its grace period
])
def test_phase_follows_the_kubelets_getPhase(initialized, containers, deleting, expected):
    assert phase(initialized=initialized, containers=containers, deleting=deleting) == expected


def test_conditions_name_unready_containers_and_keep_transition_times():
    init = [ContainerRecord("model-fetch", "busybox", ready=True)]
    starting = [_rec(RUNNING, ready=False)]
    first = conditions([], sandbox_ready=True, init_containers=init, containers=starting, now=1000.0)
    by_type = {c["type"]: c for c in first}
    assert list(by_type) == ["PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"]
    assert by_type["Initialized"]["status"] == "True" and "reason" not in by_type["Initialized"]
    assert by_type["Ready"] == {"type": "Ready", "status": "False", "lastProbeTime": None,
                                "lastTransitionTime": "1970-01-01T00:16:40Z", "reason": "ContainersNotReady",
                                "message": "containers with unready status: [triton]"}
    # Same statuses later: transition times stay; Ready flips: only its time moves.
    again = {c["type"]: c for c in conditions(first, sandbox_ready=True, init_containers=init,
                                              containers=starting, now=2000.0)}
    assert again["Ready"]["lastTransitionTime"] == "1970-01-01T00:16:40Z"
    ready = {c["type"]: c for c in conditions(first, sandbox_ready=True, init_containers=init,
                                              containers=[_rec(RUNNING, ready=True)], now=3000.0)}
    assert ready["Ready"]["status"] == "True" and ready["Ready"]["lastTransitionTime"] == "1970-01-01T00:50:00Z"
    assert "reason" not in ready["Ready"]  # a merge patch replaces the list: nothing stale is left
    assert ready["Initialized"]["lastTransitionTime"] == by_type["Initialized"]["lastTransitionTime"]
    pending_init = {c["type"]: c for c in conditions(
        [], sandbox_ready=True, init_containers=[ContainerRecord("model-fetch", "busybox")], containers=starting,
        now=1.0)}
    assert pending_init["Initialized"]["reason"] == "ContainersNotInitialized"
    assert pending_init["Initialized"]["message"] == "containers with incomplete status: [model-fetch]"


def test_pod_status_carries_ips_start_time_and_container_statuses():
    rec = _rec(RUNNING, ready=True, last_state=CRASHED)
    rec.restart_count, rec.container_id = 1, "sandbox://42"
    status = pod_status(previous_conditions=[], pod_ip="10.244.0.7", host_ip="127.0.0.1", start_time=60.0,
                        init_containers=[ContainerRecord("model-fetch", "busybox", state=DONE, ready=True)],
                        containers=[rec], deleting=False, now=200.0)
    assert status["phase"] == "Running"
    assert (status["podIP"], status["podIPs"], status["hostIP"]) == ("10.244.0.7", [{"ip": "10.244.0.7"}],
                                                                     "127.0.0.1")
    assert status["startTime"] == "1970-01-01T00:01:00Z"
    cs = status["containerStatuses"][0]
    assert (cs["restartCount"], cs["ready"], cs["started"], cs["containerID"]) == (1, True, True, "sandbox://42")
    assert cs["lastState"]["terminated"]["exitCode"] == 137 and cs["lastState"]["terminated"]["reason"] == "Error"
    assert status["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


def test_exit_codes_are_reported_like_a_container_runtime():
    assert (exit_code(-9), exit_code(-15), exit_code(0), exit_code(3)) == (137, 143, 0, 3)


# --------------------------------------------------------------------------- restarts


def test_restart_backoff_is_immediate_then_10_20_40_up_to_300_and_resets_after_10_minutes():
    b = RestartBackoff()
    t = 1000.0
    assert b.delay(finished_at=t, now=t) == 0  # first crash: restart at once
    waits = []
    for _ in range(7):  # each later crash happens right after the restart
        t += 1
        wait = b.delay(finished_at=t, now=t)
        waits.append(wait)
        t += wait
        assert b.delay(finished_at=t - wait, now=t) == 0  # once waited, it restarts
    assert waits == [10, 20, 40, 80, 160, 300, 300]
    t += 601  # running fine for more than 2 x 300 s: back to the start
    assert b.delay(finished_at=t, now=t) == 0
    assert b.delay(finished_at=t + 1, now=t + 1) == 10


# --------------------------------------------------------------------------- container


def test_args_map_container_paths_and_ports_onto_the_host():
    mounts = [Mount("/models", Path("/w/pods/p/volumes/model-repository")), Mount("/config", Path("/w/cm"))]
    args = ["--model-repository=/models", "--http-port=8000", "--grpc-port=8001", "--metrics-port=8002",
            "--exit-on-error=true", "--cache-config=local,size=1048576", "--backend-config=x,port=8000"]
    assert map_args(args, mounts, {8000: 41000, 8001: 41001, 8002: 41002}) == [
        "--model-repository=/w/pods/p/volumes/model-repository", "--http-port=41000", "--grpc-port=41001",
        "--metrics-port=41002", "--exit-on-error=true", "--cache-config=local,size=1048576",
        "--backend-config=x,port=8000"]


def test_paths_map_as_whole_components_in_one_pass():
    mounts = [Mount("/models", Path("/tmp/a")), Mount("/mnt/pvc", Path("/tmp/store")), Mount("/tmp", Path("/x"))]
    script = ("mkdir -p '/models/linear'\nfor e in '/mnt/pvc/linear'/*; do ln -s \"$e\" '/models/linear'/; done\n"
              "cp /config/config.pbtxt /models2 /models")
    assert rewrite_paths(script, mounts) == (
        "mkdir -p '/tmp/a/linear'\nfor e in '/tmp/store/linear'/*; do ln -s \"$e\" '/tmp/a/linear'/; done\n"
        "cp /config/config.pbtxt /models2 /tmp/a")  # /tmp/a is not rewritten again by the /tmp mount


def test_env_has_literal_values_and_downward_api_fields():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n0"}}
    container = {"env": [{"name": "A", "value": "1"},
                         {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    assert container_env(container, pod, "10.244.0.3") == {"A": "1", "IP": "10.244.0.3"}


# --------------------------------------------------------------------------- network and routing


def test_pod_network_gives_distinct_ips_and_resolves_container_ports():
    net = PodNetwork()
    a = net.attach("uid-a", node_pod_cidr(0), [8000, 8001, 8002])
    b = net.attach("uid-b", node_pod_cidr(0), [8000])
    assert (a.ip, b.ip) == ("10.244.0.2", "10.244.0.3")
    assert net.attach("uid-a", node_pod_cidr(0), [8000]) is a  # idempotent per pod
    assert len(set(a.host_ports.values()) | set(b.host_ports.values())) == 4
    assert net.resolve("10.244.0.2", 8000) == f"127.0.0.1:{a.host_ports[8000]}"
    assert net.resolve("10.244.0.2", 9999) is None
    net.detach("uid-a")
    assert net.resolve("10.244.0.2", 8000) is None
    assert net.attach("uid-c", node_pod_cidr(1), [8000]).ip == "10.244.1.2"


def _slice(endpoints, ports=(("http", 8000), ("metrics", 8002)), address_type="IPv4"):
    return {"addressType": address_type, "ports": [{"name": n, "port": p} for n, p in ports],
            "endpoints": [{"addresses": [ip], "conditions": cond} for ip, cond in endpoints]}


def test_kube_proxy_routes_to_ready_endpoints_and_falls_back_to_serving_terminating_ones():
    ready = {"ready": True, "serving": True, "terminating": False}
    starting = {"ready": False, "serving": False, "terminating": False}
    draining = {"ready": False, "serving": True, "terminating": True}
    slices = [_slice([("10.244.0.3", ready), ("10.244.0.4", starting)]), _slice([("10.244.0.2", draining)]),
              _slice([("10.244.0.3", ready)])]
    assert pick_endpoints(slices, "http") == [("10.244.0.3", 8000)]
    assert pick_endpoints(slices, "metrics") == [("10.244.0.3", 8002)]
    assert pick_endpoints(slices, "grpc") == []
    # No ready endpoint left: the serving terminating ones, as kube-proxy does.
    assert pick_endpoints([_slice([("10.244.0.2", draining), ("10.244.0.4", starting)])], "http") == \
        [("10.244.0.2", 8000)]
    # Unset conditions mean "unknown", read as ready.
    assert pick_endpoints([_slice([("10.244.0.9", {})])], "http") == [("10.244.0.9", 8000)]
    assert pick_endpoints([_slice([("fd00::1", ready)], address_type="IPv6")], "http") == []


# --------------------------------------------------------------------------- probes and the Node


def test_probe_specs_resolve_named_ports_and_take_the_apis_defaults():
    container = {"ports": [{"name": "http", "containerPort": 8000}],
                 "startupProbe": {"httpGet": {"path": "/v2/models/linear/ready", "port": "http"},
                                  "periodSeconds": 5, "failureThreshold": 120},
                 "readinessProbe": {"tcpSocket": {"port": 8000}},
                 "livenessProbe": {"exec": {"command": ["true"]}}}
    startup = ProbeSpec.from_container(container, "startup")
    assert (startup.action, startup.port, startup.path, startup.period_s, startup.failure_threshold,
            startup.timeout_s, startup.success_threshold) == ("httpGet", 8000, "/v2/models/linear/ready", 5, 120, 1, 1)
    readiness = ProbeSpec.from_container(container, "readiness")
    assert (readiness.action, readiness.port, readiness.period_s, readiness.failure_threshold) == \
        ("tcpSocket", 8000, 10, 3)
    assert ProbeSpec.from_container(container, "liveness").action == "unsupported"
    assert ProbeSpec.from_container({}, "readiness") is None


def test_node_offers_the_machines_cores_and_two_gpus_per_core_unless_told(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert machine_resources().gpus == 4 and machine_resources().cpu == 2
    assert machine_resources(gpus=7).gpus == 7
    two = machine_resources(nodes=2)
    assert (two.cpu, two.gpus) == (1, 2)
    node = node_object("sandbox-node-0", 0, machine_resources(), now=0.0)
    assert node["status"]["capacity"][GPU] == "4" == node["status"]["allocatable"][GPU]
    assert node["status"]["capacity"]["cpu"] == "2" and node["status"]["capacity"]["pods"] == "110"
    assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"
    assert node["spec"]["podCIDR"] == "10.244.0.0/24"
