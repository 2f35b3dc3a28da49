"""A learning-rate scheduler partial plus when to step it (Lightning's interval/frequency)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

# Constructor arguments that mean "the run's length" and may be left null in the config.
LENGTH_ARGS = ("T_max", "total_steps")


@dataclass
class SchedulerSpec:
    factory: partial
    interval: str = "epoch"  # "epoch" or "step" (optimizer steps)
    frequency: int = 1

    def build(self, optimizer, total_intervals: int):
        """Instantiate on ``optimizer``; null length arguments become ``total_intervals``."""
        fill = {
            k: total_intervals for k in LENGTH_ARGS if k in self.factory.keywords and self.factory.keywords[k] is None
        }
        return self.factory(optimizer, **fill)
