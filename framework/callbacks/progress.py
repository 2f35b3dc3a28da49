"""A tqdm progress bar with the training loss and samples/s (rank 0 only)."""
from __future__ import annotations

import sys

from tqdm.auto import tqdm


class ProgressBar:
    """Refreshes its loss figure every ``refresh_every_n_steps`` optimizer steps, the only
    time it reads the loss from the device."""

    def __init__(self, refresh_every_n_steps: int = 10):
        self.refresh_every_n_steps = refresh_every_n_steps
        self.bar = None
        self._postfix: dict[str, str] = {}
        self._redirect = None

    def on_fit_start(self, trainer) -> None:
        if trainer.is_global_zero:
            # Log lines (checkpoints saved, ...) print above the bar instead of through it.
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._redirect = logging_redirect_tqdm(tqdm_class=tqdm)
            self._redirect.__enter__()

    def on_fit_end(self, trainer) -> None:
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None

    def on_train_epoch_start(self, trainer) -> None:
        self.bar = tqdm(total=trainer.num_training_batches, desc=f"Epoch {trainer.current_epoch}",
                        unit="batch", disable=not trainer.is_global_zero, file=sys.stderr,
                        dynamic_ncols=True, leave=True)

    def on_train_batch_end(self, trainer, loss, batch_idx: int) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def on_train_step_end(self, trainer, loss) -> None:
        if self.bar is None or self.bar.disable or trainer.global_step % self.refresh_every_n_steps:
            return
        recent = trainer.step_times[-self.refresh_every_n_steps:]
        self._postfix["loss"] = f"{loss.item():.4f}"
        self._postfix["samples/s"] = f"{trainer.global_batch_size * len(recent) / max(sum(recent), 1e-9):.0f}"
        self.bar.set_postfix(self._postfix, refresh=False)

    def on_validation_end(self, trainer, metrics: dict) -> None:
        for name in ("val/loss", "val/acc"):
            if name in metrics:
                self._postfix[name] = f"{metrics[name]:.4f}"
        if self.bar is not None:
            self.bar.set_postfix(self._postfix, refresh=True)

    def on_train_epoch_end(self, trainer) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_exception(self, trainer, error: BaseException) -> None:
        self.on_train_epoch_end(trainer)
        self.on_fit_end(trainer)
