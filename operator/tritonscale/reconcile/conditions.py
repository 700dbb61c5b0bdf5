"""Kubernetes-convention conditions, as pure functions over plain dicts."""

from __future__ import annotations

import datetime
from typing import Any


def rfc3339(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: bool | str,
    reason: str,
    message: str,
    now: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Return a new list with ``type_`` set; lastTransitionTime moves only when status flips."""
    status_s = status if isinstance(status, str) else ("True" if status else "False")
    out, found = [], False
    for cond in conditions or []:
        if cond.get("type") != type_:
            out.append(cond)
            continue
        found = True
        changed = cond.get("status") != status_s
        new = {**cond, "status": status_s, "reason": reason, "message": message}
        if changed or "lastTransitionTime" not in cond:
            new["lastTransitionTime"] = rfc3339(now)
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    if not found:
        new = {"type": type_, "status": status_s, "reason": reason, "message": message,
               "lastTransitionTime": rfc3339(now)}
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    return out


def get_condition(conditions: list[dict[str, Any]] | None, type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)
