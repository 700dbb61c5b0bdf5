"""``static:N``: N warm replicas for the whole run -- the provisioning baseline."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tritonscale.simulate.engine import View


@dataclass
class StaticPolicy:
    replicas: int
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"static:{self.replicas}"

    def initial_replicas(self, default: int) -> int:
        return self.replicas

    def tick_times(self, horizon: float) -> np.ndarray:
        return np.empty(0)

    def step(self, view: View) -> tuple[int, str]:
        return self.replicas, "Static"
