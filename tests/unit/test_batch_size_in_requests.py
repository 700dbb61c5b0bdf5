"""``decider.in_requests``: maxBatchSize (items) in requests, exact where the division is whole."""

from __future__ import annotations

import pytest

from tritonscale.scaling import decider as D
from tritonscale.scaling.decider import Observation, Policy


@pytest.mark.parametrize(("max_batch", "items", "requests"), [
    (33, 1.1, 30),  # 33 / 1.1 is 29.999999999999996 in floats: a full batch still holds 30 requests
    (16, 4.0, 4),
    (16, 3.0, 5),  # 5.33: whole requests only
    (16, None, 16),  # one item each
])
def test_max_batch_size_in_requests(max_batch: int, items: float | None, requests: int) -> None:
    """A full batch of 1.1-item requests at maxBatchSize 33 holds 30 requests. Truncating the float
    29.999999999999996 to 29 would plan every replica's capacity 3% low, and the fleet a replica larger
    than it needs at scale."""
    obs = Observation(status="ok", rps=100.0, items_per_request=items)
    assert D.in_requests(Policy(max_batch_size=max_batch), obs).max_batch_size == requests
