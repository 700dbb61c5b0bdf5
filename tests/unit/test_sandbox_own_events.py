"""sandbox/orchestrator.own_events: the sandbox's live view and summary count the scale Events of the
InferenceService it made, not those of an earlier one of the name (a cluster given with --kubeconfig
keeps a deleted object's Events for an hour: session 83's walkthrough saw one counted as this run's)."""

from __future__ import annotations

from tritonscale.sandbox.cluster_reader import own_events


def event(uid: str, reason: str, name: str, owner_uid: str) -> dict:
    return {"metadata": {"uid": uid}, "reason": reason, "message": f"{reason} {uid}",
            "involvedObject": {"kind": "InferenceService", "name": name, "uid": owner_uid}}


def test_only_this_objects_scale_and_tuning_events():
    obj = {"metadata": {"name": "linear", "uid": "new"}}
    events = [
        event("e1", "Scaled", "linear", "old"),  # the object of the name deleted before this run
        event("e2", "Scaled", "linear", "new"),
        event("e3", "BatchingTuned", "linear", "new"),
        event("e4", "Created", "linear", "new"),  # not a scale
        event("e5", "Scaled", "other", "new"),
    ]
    assert own_events(events, obj) == [("e2", "Scaled", "Scaled e2"), ("e3", "BatchingTuned", "BatchingTuned e3")]
