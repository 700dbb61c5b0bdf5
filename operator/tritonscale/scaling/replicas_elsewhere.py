"""Another writer of the Deployment's spec.replicas, which the autoscaler alone owns: who set the count a
tick finds (an HorizontalPodAutoscaler, `kubectl scale`, another controller, by the Deployment's
managedFields), a ReplicasSetElsewhere Warning naming them once an hour, and the Scaling condition's
message while the overrides recur (two scalers undoing each other at every tick)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from tritonscale.kube.client import OWN_MANAGERS

EventFn = Callable[[dict[str, Any], str, str, str], None]  # (body, type, reason, message)
log = logging.getLogger("tritonscale.autoscaler")

# By object uid: which other writers of the Deployment's spec.replicas were last named, and when. An
# HPA fighting the autoscaler overrides it every 15 s; the event names the same writers again only
# once the last one has expired (an hour, the API server's default event TTL).
_overridden: dict[str, tuple[str, float]] = {}
OVERRIDE_REPEAT_S = 3600.0
# By object uid: when each override of spec.replicas was seen, within the last FIGHT_WINDOW_S. Once one
# recurs -- another scaler that keeps setting the count (an HPA reconciles every 15 s), not one `kubectl
# scale` -- the Scaling condition says so at every tick until none has been seen for the window: the
# hourly event alone left status saying Steady while the fleet flapped, a cold start at each swing.
_overrides_seen: dict[str, list[float]] = {}
FIGHT_WINDOW_S = 600.0
FIGHT_OVERRIDES = 2


def forget(uid: str) -> None:
    """A deleted object's entries go."""
    _overridden.pop(uid, None)
    _overrides_seen.pop(uid, None)


def replicas_writers(deployment: dict[str, Any]) -> list[str]:
    """The field managers other than this operator's that own the Deployment's spec.replicas (the last
    writer of a field owns it): an HorizontalPodAutoscaler (kube-controller-manager, through the scale
    subresource), `kubectl scale` (kubectl), another controller."""
    out = []
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        if not isinstance(entry, dict) or entry.get("manager") in OWN_MANAGERS:
            continue
        fields = entry.get("fieldsV1") or {}
        if isinstance(fields, dict) and "f:replicas" in (fields.get("f:spec") or {}):
            via = f" (through /{entry['subresource']})" if entry.get("subresource") else ""
            out.append(f"{entry.get('manager') or 'an unnamed writer'}{via}")
    return out


@dataclasses.dataclass(frozen=True)
class Override:
    """What a tick found of another writer of spec.replicas: who set the count it found (none: it is this
    operator's), and what the Scaling condition says while overrides recur (None: they do not)."""

    asked: int | None = None
    writers: tuple[str, ...] = ()
    fight: str | None = None


def replicas_overridden(body: dict[str, Any], status: Mapping[str, Any], deployment: dict[str, Any],
                         current: int, last_reason: str | None, now: float, event: EventFn) -> Override:
    """spec.replicas is not what this operator asked for last, and another writer owns it: a Warning
    event and a log line, once per set of writers (again after OVERRIDE_REPEAT_S). The autoscaler owns
    the field; a second scaler on the Deployment (an HPA, `kubectl scale`) is overruled at every tick,
    and the fleet flaps between the two. Not while this operator's own last patch failed (ScaleFailed):
    the count then differs with nobody else involved. ``last_reason``: the Scaling condition's. The
    ``Override`` says who, and what the Scaling condition says while overrides recur (``FIGHT_OVERRIDES``
    within FIGHT_WINDOW_S)."""
    asked = status.get("desiredReplicas")
    uid = body["metadata"]["uid"]
    failed = last_reason == "ScaleFailed"
    writers = replicas_writers(deployment) if isinstance(asked, int) and asked != current and not failed else []
    seen = [t for t in _overrides_seen.get(uid, ()) if now - t < FIGHT_WINDOW_S] + ([now] if writers else [])
    if seen:
        _overrides_seen[uid] = seen
    else:
        _overrides_seen.pop(uid, None)
    fight = None
    if len(seen) >= FIGHT_OVERRIDES:
        who = ", ".join(writers) if writers else (_overridden.get(uid) or ("another writer", 0.0))[0]
        fight = (f"another writer keeps setting the Deployment's spec.replicas ({who}: {len(seen)} times in the "
                 f"last {FIGHT_WINDOW_S / 60:g} minutes), and each change is undone at the next tick: a second "
                 f"scaler on the Deployment (an HorizontalPodAutoscaler's writes come from kube-controller-manager). "
                 f"Remove it, and scale through spec.scaling")
    found = Override(asked if isinstance(asked, int) else None, tuple(writers), fight)
    if not writers:
        return found
    key = ", ".join(writers)
    said = _overridden.get(uid)
    if said is not None and said[0] == key and now - said[1] < OVERRIDE_REPEAT_S:
        return found
    message = (f"the Deployment's spec.replicas is {current}, set by {key}, not the {asked} this "
               f"operator asked for: the autoscaler owns that field, so another scaler on the Deployment (an "
               f"HorizontalPodAutoscaler, kubectl scale) and the autoscaler's own decisions overrule each other "
               f"(while its metrics fail, the autoscaler holds the count it finds); remove it, and scale through "
               f"spec.scaling instead")
    _overridden[uid] = (key, now)
    event(body, "Warning", "ReplicasSetElsewhere", message[:1000])
    meta = body["metadata"]
    log.warning("%s/%s: %s", meta["namespace"], meta["name"], message)
    return found
