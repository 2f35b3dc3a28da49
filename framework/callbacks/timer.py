"""Timer: stop training after ``trainer.max_time`` of training time (Lightning's Timer)."""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, Optional

from framework.config.durations import parse_duration

log = logging.getLogger(__name__)


class Timer:
    """Stops the fit loop once ``duration`` ("DD:HH:MM:SS", {days, hours, minutes, seconds} or
    seconds) of training has passed, counted over resumes (its elapsed time is checkpointed).
    The run then ends as a completed one: final validation, test, checkpoints. ``interval:
    step`` checks after every optimizer step (every rank stops after the same step), ``epoch``
    at epoch ends. ``trainer.max_time`` adds one; ``trainer.min_epochs`` / ``min_steps`` win."""

    def __init__(self, duration: Any = None, interval: Literal["step", "epoch"] = "step"):
        if interval not in ("step", "epoch"):
            raise ValueError(f"callbacks.timer.interval: {interval!r} is not 'step' or 'epoch'")
        self.duration: Optional[float] = (
            None
            if duration is None
            else (float(duration) if isinstance(duration, (int, float)) else parse_duration(duration))
        )
        self.interval = interval
        self._before = 0.0  # training seconds of earlier attempts (restored from a checkpoint)
        self._started: Optional[float] = None
        self.stopped_at_step: Optional[int] = None

    def time_elapsed(self) -> float:
        return self._before + (time.monotonic() - self._started if self._started is not None else 0.0)

    def on_fit_start(self, trainer) -> None:
        self._started = time.monotonic()

    def on_fit_end(self, trainer) -> None:
        self._before, self._started = self.time_elapsed(), None

    def _check(self, trainer, stop) -> None:
        if self.duration is None or self.stopped_at_step is not None or self.time_elapsed() < self.duration:
            return
        self.stopped_at_step = trainer.global_step
        if trainer.is_global_zero:
            log.info("max_time: %.1f s of training reached at step %d; stopping", self.duration, trainer.global_step)
        stop()

    def on_train_step_end(self, trainer, loss) -> None:
        if self.interval == "step":
            self._check(trainer, trainer.request_stop)

    def on_train_epoch_end(self, trainer) -> None:
        if self.interval == "epoch":  # the engine agrees on should_stop right after this hook
            self._check(trainer, lambda: setattr(trainer, "should_stop", True))

    def state_dict(self) -> dict:
        return {"time_elapsed": self.time_elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self._before = float(state.get("time_elapsed", 0.0))
