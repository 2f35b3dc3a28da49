"""The fit loop's progress: exactly what a checkpoint saves of it, nothing derived."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LoopState:
    """Where training stands. Between epochs it reads ``(epoch e, 0 batches, not finished)``;
    a checkpoint taken in an epoch's end callbacks reads ``(e, all batches, finished)`` and
    resumes at epoch e+1 without redoing the end of epoch e (validation, scheduler step)."""

    global_step: int = 0  # optimizer steps taken
    current_epoch: int = 0  # the epoch being trained, or the next one between epochs
    batch_in_epoch: int = 0  # training batches of current_epoch already run (the resume point)
    epoch_finished: bool = False  # current_epoch's end-of-epoch work is done
    last_val_step: int = -1  # global_step of the latest validation (-1: none yet)

    def advance_if_finished(self) -> None:
        """Move past a finished epoch: the next one starts at its first batch."""
        if self.epoch_finished:
            self.current_epoch, self.batch_in_epoch, self.epoch_finished = self.current_epoch + 1, 0, False

    @property
    def epochs_run(self) -> int:
        """Epochs trained in, the current one counted once it has a batch."""
        return self.current_epoch + (1 if self.batch_in_epoch > 0 or self.epoch_finished else 0)
