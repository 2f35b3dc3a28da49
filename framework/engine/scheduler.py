"""A learning-rate scheduler partial plus when to step it (Lightning's interval/frequency)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial
from typing import Optional

# Constructor arguments that mean "the run's length" and may be left null in the config.
LENGTH_ARGS = ("T_max", "total_steps")


@dataclass
class SchedulerSpec:
    factory: partial
    interval: str = "epoch"  # "epoch" or "step" (optimizer steps)
    frequency: int = 1

    def null_lengths(self) -> list[str]:
        """The length arguments the config left null: the run's length fills them."""
        return [k for k in LENGTH_ARGS if k in self.factory.keywords and self.factory.keywords[k] is None]

    def build(self, optimizer, total_intervals: int):
        """Instantiate on ``optimizer``; null length arguments become ``total_intervals``."""
        return self.factory(optimizer, **dict.fromkeys(self.null_lengths(), total_intervals))

    def load(self, scheduler, state: dict) -> Optional[tuple[str, int, int]]:
        """Load a checkpoint's ``state`` into ``scheduler`` (``build``'s, for this run). A length left
        null is this run's, not the checkpoint's: resumed with more epochs or steps, the schedule
        stretches to them and the learning rate is the longer schedule's at this step (keeping the
        old length, a cosine past its end would climb again). Returns (key, saved, now) when it did."""
        filled = self.null_lengths()
        now = {k: v for k, v in vars(scheduler).items() if k in filled or k == "_schedule_phases"}  # (OneCycle's)
        scheduler.load_state_dict(state)
        changed = next(((k, state[k], now[k]) for k in filled if k in now and state.get(k, now[k]) != now[k]), None)
        if changed is None or scheduler.last_epoch > changed[2]:
            return None  # (the same length, or one this run has passed already: it ends at once)
        vars(scheduler).update(now)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (get_lr outside step(): its value at this step is the one wanted)
            lrs = getattr(scheduler, "_get_closed_form_lr", scheduler.get_lr)()
        for group, lr in zip(scheduler.optimizer.param_groups, lrs):
            group["lr"] = lr
        scheduler._last_lr = list(lrs)
        return changed
