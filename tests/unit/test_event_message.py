"""An Event's message fits the API server's limit, which counts bytes (auditK D1): messages were cut at
1,000 characters, so a Warning of 1,000 "é" (2,000 bytes) was refused with 422, Kopf dropped it with a
log line, and ``kubectl describe`` never showed it."""

from __future__ import annotations

import pytest

from tritonscale.handlers import events


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize("message", ["é" * 1000, "東" * 600, "a" * 1500, "x" * 1023 + "é", "😀" * 300])
def test_a_long_message_is_cut_to_the_byte_limit_on_a_character_boundary(message: str) -> None:
    cut = events.event_message(message)
    assert _bytes(cut) <= events.EVENT_MESSAGE_BYTES
    assert cut.endswith("...") and message.startswith(cut[:-3])
    assert _bytes(cut) > events.EVENT_MESSAGE_BYTES - 8  # as much as fits, not a character count


def test_a_lone_surrogate_counts_as_the_three_bytes_the_server_sees() -> None:
    cut = events.event_message("\udce9" * 400)  # 1,200 bytes once the server reads it as U+FFFD
    assert _bytes(cut) <= events.EVENT_MESSAGE_BYTES and cut.endswith("...")


@pytest.mark.parametrize("message", ["é" * 512, "a" * 1024, ""])
def test_a_message_within_the_limit_is_left_alone(message: str) -> None:
    assert events.event_message(message) == message
