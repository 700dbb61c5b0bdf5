"""The Kubernetes Events the handlers post (through Kopf), within the API server's limit on a message."""

from __future__ import annotations

from typing import Any

import kopf

# The API server's limit on an Event's message, in bytes of UTF-8 (core/v1 validation counts Go string
# bytes); Kopf cuts at 1,024 characters, so a message of multi-byte text under that was refused (422),
# and Kopf dropped the Event with a log line.
EVENT_MESSAGE_BYTES = 1024


def event_message(message: str) -> str:
    """``message`` within EVENT_MESSAGE_BYTES, cut on a character boundary and ended with "..." if cut."""
    raw = message.encode("utf-8", "surrogatepass")  # a lone surrogate reaches the server as 3 bytes (U+FFFD)
    if len(raw) <= EVENT_MESSAGE_BYTES:
        return message
    return raw[:EVENT_MESSAGE_BYTES - 3].decode("utf-8", "ignore") + "..."


def _post_event(body: Any, type_: str, reason: str, message: str) -> None:
    kopf.event(body, type=type_, reason=reason, message=event_message(message))
