"""Dynamic loss scaling for low-precision training, with ``torch.amp.GradScaler``'s rules.

The loss is multiplied by `scale` before the adjoint runs, so that small gradients stay
above the low-precision format's underflow; the gradients are divided by it again in the
master precision. A step whose gradients hold an Inf or a NaN is skipped and halves the
scale; `growth_interval` clean steps in a row double it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class LossScaler:
    scale: float = 2.0 ** 16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    growth_tracker: int = 0      # clean steps since the last change of scale

    def update(self, found_inf: bool) -> None:
        """After a step: halve on Inf/NaN (the step was skipped), double after
        `growth_interval` clean steps in a row."""
        if found_inf:
            self.scale *= self.backoff_factor
            self.growth_tracker = 0
            return
        self.growth_tracker += 1
        if self.growth_tracker == self.growth_interval:
            grown = self.scale * self.growth_factor
            if math.isfinite(grown):
                self.scale = grown
            self.growth_tracker = 0

    def state(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker}

    def load_state(self, state: dict) -> None:
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
