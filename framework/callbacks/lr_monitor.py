"""LearningRateMonitor: the optimizer's learning rate(s) to the loggers."""

from __future__ import annotations

from typing import Literal


class LearningRateMonitor:
    """Logs ``lr-<Optimizer>`` for the first param group and ``lr-<Optimizer>/<name>`` for the others
    (a group's ``name``, as ``optimizer.param_groups`` sets it, or ``pg<i>``; a named first group too)
    every ``log_every_n_steps`` optimizer steps (``logging_interval: step``) or at each epoch end (``epoch``)."""

    def __init__(self, logging_interval: Literal["step", "epoch"] = "step"):
        if logging_interval not in ("step", "epoch"):
            raise ValueError(f"callbacks.lr_monitor.logging_interval: {logging_interval!r} is not 'step' or 'epoch'")
        self.logging_interval = logging_interval

    def _log(self, trainer) -> None:
        name = f"lr-{type(trainer.inner_optimizer).__name__}"  # the configured class, inside any wrapper
        trainer.log_metrics(
            {_key(name, i, group): float(group["lr"]) for i, group in enumerate(trainer.optimizer.param_groups)}
        )

    def on_train_step_end(self, trainer, loss) -> None:
        if self.logging_interval == "step" and trainer.global_step % trainer.config.log_every_n_steps == 0:
            self._log(trainer)

    def on_train_epoch_end(self, trainer) -> None:
        if self.logging_interval == "epoch":
            self._log(trainer)


def _key(name: str, index: int, group: dict) -> str:
    if "name" in group:
        return f"{name}/{group['name']}"
    return name if index == 0 else f"{name}/pg{index}"
