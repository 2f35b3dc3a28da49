"""EarlyStopping: stop when a monitored metric stops improving, leaves a bound, or is not finite."""

from __future__ import annotations

import logging
import math
from typing import Literal, Optional

from framework.config.ranges import Range

log = logging.getLogger(__name__)


class EarlyStopping:
    """Lightning's EarlyStopping. Checked after each validation (or at each epoch end for a
    ``train/`` metric). Metrics are reduced across ranks before callbacks see them, and the
    engine reduces ``should_stop`` too, so every rank stops at the same step."""

    argument_ranges = {"patience": Range(low=0)}

    def __init__(
        self,
        monitor: str = "val/loss",
        mode: Literal["min", "max"] = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        check_finite: bool = True,
        stopping_threshold: Optional[float] = None,
        divergence_threshold: Optional[float] = None,
    ):
        if mode not in ("min", "max"):
            raise ValueError(f"callbacks.early_stopping.mode: {mode!r} is not one of 'min', 'max'")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, abs(min_delta)
        self.check_finite = check_finite
        self.stopping_threshold, self.divergence_threshold = stopping_threshold, divergence_threshold
        self.best = math.inf if mode == "min" else -math.inf
        self.wait = 0
        self._warned = False

    def on_validation_end(self, trainer, metrics: dict) -> None:
        if self.monitor in metrics:
            self._check(trainer, metrics[self.monitor])
        elif not self.monitor.startswith("train/"):
            self._warn_unlogged(trainer, metrics)

    def on_train_epoch_end(self, trainer) -> None:
        if not self.monitor.startswith("train/"):
            return
        if self.monitor in trainer.logged_metrics:
            self._check(trainer, trainer.logged_metrics[self.monitor])
        else:
            self._warn_unlogged(trainer, trainer.logged_metrics)

    def _warn_unlogged(self, trainer, metrics: dict) -> None:
        if not self._warned and trainer.is_global_zero:
            log.warning(
                "callbacks.early_stopping.monitor: %r has not been logged (logged: %s); "
                "early stopping does nothing until it is",
                self.monitor,
                sorted(metrics),
            )
        self._warned = True

    def state_dict(self) -> dict:
        return {"best": self.best, "wait": self.wait}

    def load_state_dict(self, state: dict) -> None:
        self.best, self.wait = state["best"], state["wait"]

    def _improves(self, value: float, reference: float, margin: float) -> bool:
        return value < reference - margin if self.mode == "min" else value > reference + margin

    def _check(self, trainer, value: float) -> None:
        reason = None
        if self.check_finite and not math.isfinite(value):
            reason = f"{self.monitor} = {value} is not finite"
        elif self.stopping_threshold is not None and self._improves(value, self.stopping_threshold, 0.0):
            reason = f"{self.monitor} = {value:.6g} reached stopping_threshold {self.stopping_threshold}"
        elif self.divergence_threshold is not None and self._improves(self.divergence_threshold, value, 0.0):
            reason = f"{self.monitor} = {value:.6g} diverged past divergence_threshold {self.divergence_threshold}"
        elif self._improves(value, self.best, self.min_delta):
            self.best, self.wait = value, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                reason = (
                    f"{self.monitor} did not improve by more than {self.min_delta} for {self.wait} checks "
                    f"(best {self.best:.6g})"
                )
        if reason:
            trainer.should_stop = True
            if trainer.is_global_zero:
                log.info("Early stopping at step %d: %s", trainer.global_step, reason)
