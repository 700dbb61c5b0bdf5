"""A tick whose tuner changes the batcher settings decides again with them (``tick._decide_again``): the decider
plans with the settings in force, and from that tick they are the tuner's. Found in the sandbox from a 150 ms
delay (``tritonscale sandbox --batching-tuner-from 150000``, session 98): at the first tick the decider planned
that delay (no rate meets the 200 ms target with it; about 1.2 rps per replica on the cost guessed from one
batch size) and asked for maxReplicas, and the tuner's change then waited for the GPUs those replicas held."""

from __future__ import annotations

import copy

from test_tick_invalid_edit import Made
from test_tick_scale_failed import UID

from tritonscale.scaling import tick
from tritonscale.scaling.prometheus_source import Snapshot

KEY = ("default", "linear", "linear")


def _sandbox_from_150ms() -> Made:
    """The sandbox's sample as `--batching-tuner-from 150000` runs it: max batch 4, target 200 ms, a 150 ms delay
    and no preferred sizes, autoTune on; one replica, ready, the Deployment's rollout done."""
    body = copy.deepcopy(Made().body)
    body["spec"]["model"]["maxBatchSize"] = 4
    body["spec"]["model"]["warmup"] = {"batchSizes": [1, 4]}
    body["spec"]["batching"] = {"maxQueueDelayMicroseconds": 150_000, "autoTune": {"enabled": True}}
    body["spec"]["scaling"]["targetP95Milliseconds"] = 200
    kube = Made(body)  # the Deployment made from it
    kube.body = body
    kube.refuse = False
    kube.deployment["spec"]["replicas"] = 1
    kube.deployment["metadata"]["generation"] = 1
    kube.deployment["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1}
    # one batch size seen so far (batches of 2.5 at 63.6 ms): the decider guesses a cost from it
    kube.body["status"] = {"scalingState": {"batchSamples": [[2.5, 63.6, 990.0]], "coldStartSeconds": 5.0}}
    return kube


def _snapshot(now: float) -> Snapshot:
    values = {"rps": 14.0, "p95_ms": 216.0, "batch_size": 2.5, "batch_ms": 63.6, "pending": 1.0, "pending_min": 0.0,
              "replicas": 1.0, "rate_pods": 1.0, "scrape_s": 2.0, "batch_items": 1.0}
    return Snapshot(taken_at=now, ok=True, values={k: {KEY: v} for k, v in values.items()})


def test_the_tick_that_tunes_decides_with_the_tuned_settings() -> None:
    kube = _sandbox_from_150ms()
    tick.forget(UID)
    tick.run_tick(kube, "default", "linear", _snapshot(1000.0), 1000.0, lambda body, *e: None)
    batching = kube.body["status"]["batching"]
    assert (batching["maxQueueDelayMicroseconds"], batching["source"], batching["reason"]) == \
        (0, "tuner", "MoreCapacity")
    assert "from a cost guessed from one batch size" in batching["message"], batching["message"]
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    # decided with no delay: one replica serves 14 rps within the target, so no scale-up, and none to maxReplicas
    assert kube.deployment["spec"]["replicas"] == 1, scaling["message"]
    assert scaling["reason"] != "AtMaxReplicas", scaling["message"]
    assert "queue delay" not in scaling["message"], scaling["message"]  # the tuned settings hold nothing back
    tick.forget(UID)


def test_without_the_tuner_the_same_tick_plans_the_settings_in_force() -> None:
    """The contrast: autoTune off, the 150 ms delay stays in force, and the decider plans with it as before."""
    kube = _sandbox_from_150ms()
    kube.body["spec"]["batching"]["autoTune"] = {"enabled": False}
    tick.forget(UID)
    tick.run_tick(kube, "default", "linear", _snapshot(1000.0), 1000.0, lambda body, *e: None)
    assert kube.body["status"]["batching"]["maxQueueDelayMicroseconds"] == 150_000
    assert kube.deployment["spec"]["replicas"] == 4  # every replica it may: what the tuned tick no longer asks
    # ... and the Scaling condition says why, and which field to change (capacity.undelayed_capacity)
    scaling = next(c for c in kube.body["status"]["conditions"] if c["type"] == "Scaling")
    assert "the 150 ms queue delay holds it there" in scaling["message"], scaling["message"]
    assert "lower batching.maxQueueDelayMicroseconds, or let batching.autoTune choose it" in scaling["message"]
    tick.forget(UID)
