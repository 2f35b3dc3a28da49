"""LearningRateMonitor: the optimizer's learning rate(s) to the loggers."""
from __future__ import annotations


class LearningRateMonitor:
    """Logs ``lr-<Optimizer>`` (``/pg<i>`` per extra param group) every ``log_every_n_steps``
    optimizer steps (``logging_interval: step``) or at each epoch end (``epoch``)."""

    def __init__(self, logging_interval: str = "step"):
        if logging_interval not in ("step", "epoch"):
            raise ValueError(f"callbacks.lr_monitor.logging_interval: {logging_interval!r} is not 'step' or 'epoch'")
        self.logging_interval = logging_interval

    def _log(self, trainer) -> None:
        optimizer = getattr(trainer.optimizer, "optim", trainer.optimizer)  # ZeRO wraps the real one
        name = f"lr-{type(optimizer).__name__}"
        trainer.log_metrics({(name if i == 0 else f"{name}/pg{i}"): float(group["lr"])
                             for i, group in enumerate(trainer.optimizer.param_groups)})

    def on_train_step_end(self, trainer, loss) -> None:
        if self.logging_interval == "step" and trainer.global_step % trainer.config.log_every_n_steps == 0:
            self._log(trainer)

    def on_train_epoch_end(self, trainer) -> None:
        if self.logging_interval == "epoch":
            self._log(trainer)
