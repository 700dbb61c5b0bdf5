"""What the baselines share: a fixed tick, replica bounds, and a count to start from."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from typing import ClassVar, TypedDict

import numpy as np


class Bounds(TypedDict):
    """``Periodic``'s keyword fields, as one builder passes them to every baseline."""

    min_replicas: int
    max_replicas: int
    initial: int | None


@dataclass
class Periodic:
    """A baseline that acts every ``period_s`` (its controller's sync or polling period), within
    ``min_replicas``-``max_replicas``, from ``initial`` replicas (None: the cluster's). Subclasses
    add their target as the one positional field, and ``name`` and ``step``."""

    period_s: ClassVar[float]
    _: KW_ONLY
    min_replicas: int = 1
    max_replicas: int = 20
    initial: int | None = None

    def initial_replicas(self, default: int) -> int:
        return self.initial if self.initial is not None else default

    def tick_times(self, horizon: float) -> np.ndarray:
        return np.arange(self.period_s, horizon, self.period_s)

    def clamp(self, n: int) -> int:
        return max(self.min_replicas, min(self.max_replicas, n))
