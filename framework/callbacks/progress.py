"""Progress on the console (rank 0 only): a tqdm bar with the training loss and samples/s
on a terminal; one plain line per epoch when stderr is a file or a pipe (CI, SLURM logs),
where a bar's carriage returns would pile up into one unreadable line."""
from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class ProgressBar:
    """Refreshes its loss figure every ``refresh_every_n_steps`` optimizer steps, the only
    time it reads the loss from the device. ``plain``: null = a bar only on a terminal."""

    def __init__(self, refresh_every_n_steps: int = 10, plain: bool | None = None):
        self.refresh_every_n_steps = refresh_every_n_steps
        self.plain = plain
        self.bar = None
        self._postfix: dict[str, str] = {}
        self._redirect = None
        self._epoch_start, self._batches = 0.0, 0
        self._last_loss = None

    def on_fit_start(self, trainer) -> None:
        if self.plain is None:
            self.plain = not sys.stderr.isatty()
        if trainer.is_global_zero and not self.plain:
            # Log lines (checkpoints saved, ...) print above the bar instead of through it.
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._redirect = logging_redirect_tqdm(tqdm_class=tqdm)
            self._redirect.__enter__()

    def on_fit_end(self, trainer) -> None:
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None

    def on_train_epoch_start(self, trainer) -> None:
        self._epoch_start, self._batches = time.perf_counter(), 0
        if not self.plain:
            self.bar = tqdm(total=trainer.num_training_batches, desc=f"Epoch {trainer.current_epoch}",
                            unit="batch", disable=not trainer.is_global_zero, file=sys.stderr,
                            dynamic_ncols=True, leave=True)

    def on_train_batch_end(self, trainer, loss, batch_idx: int) -> None:
        self._batches += 1
        if self.bar is not None:
            self.bar.update(1)

    def on_train_step_end(self, trainer, loss) -> None:
        self._last_loss = loss  # a reference; read (a device sync) once per epoch in plain mode
        if not trainer.is_global_zero or trainer.global_step % self.refresh_every_n_steps:
            return
        recent = trainer.step_times[-self.refresh_every_n_steps:]
        self._postfix[self._loss_name(trainer)] = f"{loss.item():.4f}"
        self._postfix["samples/s"] = f"{trainer.global_batch_size * len(recent) / max(sum(recent), 1e-9):.0f}"
        if self.bar is not None:
            self.bar.set_postfix(self._postfix, refresh=False)

    @staticmethod
    def _loss_name(trainer) -> str:
        # The step's loss as rank 0 computed it on its share of the batch (reading every rank's
        # would be a collective per refresh); metrics.csv's train/loss is the global mean.
        return "loss" if trainer.world_size == 1 else "rank 0 loss"

    def on_validation_end(self, trainer, metrics: dict) -> None:
        # The task's own validation metrics, whatever they are called.
        self._postfix.update({name: f"{value:.4f}" for name, value in metrics.items() if name.startswith("val/")})
        if self.bar is not None:
            self.bar.set_postfix(self._postfix, refresh=True)

    def on_train_epoch_end(self, trainer) -> None:
        if self.plain and trainer.is_global_zero:
            if self._last_loss is not None:
                self._postfix[self._loss_name(trainer)] = f"{self._last_loss.item():.4f}"
            figures = "".join(f", {name} {value}" for name, value in self._postfix.items())
            print(f"Epoch {trainer.current_epoch}: {self._batches}/{trainer.num_training_batches} batches, "
                  f"{time.perf_counter() - self._epoch_start:.1f} s{figures}", file=sys.stderr, flush=True)
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_exception(self, trainer, error: BaseException) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.on_fit_end(trainer)
