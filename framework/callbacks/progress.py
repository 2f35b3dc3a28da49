"""Progress on the console (rank 0 only): a tqdm bar with the training loss and samples/s
on a terminal, a notebook's widget bar in the notebook's own process (when ipywidgets is
installed); one plain line per epoch elsewhere: when stderr is a file or a pipe (CI, SLURM logs),
where a bar's carriage returns would pile up into one unreadable line, or a notebook's ranks.

The loss shown is the training loss as logged (``train/loss``: the mean over every rank's share
of the batch, at the latest log step), the same quantity on every strategy."""

from __future__ import annotations

import logging
import os
import sys
import time

from tqdm.std import tqdm

from framework.config.ranges import Range

# Set by framework.api.fit in a notebook kernel: the pid of the process that can show widgets.
NOTEBOOK_PID = "FRAMEWORK_NOTEBOOK_PID"


def notebook_bar():
    """tqdm's notebook bar when this is the notebook's process and ipywidgets is there, else None."""
    if os.environ.get(NOTEBOOK_PID) != str(os.getpid()):
        return None
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        return None  # (tqdm's notebook bar would only warn "IProgress not found")
    from tqdm.notebook import tqdm as widget_tqdm

    return widget_tqdm


def console_handler(logger: logging.Logger):
    """The first of ``logger``'s handlers that writes to the console (stdout or stderr), or None."""
    streams = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return next((h for h in logger.handlers if isinstance(h, logging.StreamHandler) and h.stream in streams), None)


class ProgressBar:
    """Refreshes its figures every ``refresh_every_n_steps`` optimizer steps. ``plain``: null = a bar
    on a terminal or in a notebook's own process, plain lines elsewhere."""

    argument_ranges = {"refresh_every_n_steps": Range(low=1)}

    def __init__(self, refresh_every_n_steps: int = 10, plain: bool | None = None):
        self.refresh_every_n_steps = refresh_every_n_steps
        self.plain = plain
        self.bar = None
        self._postfix: dict[str, str] = {}
        self._redirect = None
        self._epoch_start, self._batches = 0.0, 0
        self._bar_class = tqdm

    def on_fit_start(self, trainer) -> None:
        self._bar_class = notebook_bar() if self.plain is None else None
        if self.plain is None:
            self.plain = not sys.stderr.isatty() and self._bar_class is None
        self._bar_class = self._bar_class or tqdm
        if trainer.is_global_zero and not self.plain and console_handler(logging.getLogger()) is not None:
            # Log lines (checkpoints saved, ...) print above the bar instead of through it. (Only
            # where they print at all: tqdm's redirect adds a console handler where there was none.)
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._redirect = logging_redirect_tqdm(tqdm_class=self._bar_class)
            self._redirect.__enter__()

    def on_fit_end(self, trainer) -> None:
        if self._redirect is not None:
            self._redirect.__exit__(None, None, None)
            self._redirect = None

    def on_train_epoch_start(self, trainer) -> None:
        self._epoch_start, self._batches = time.perf_counter(), 0
        if not self.plain:
            self.bar = self._bar_class(
                total=trainer.num_training_batches,
                desc=f"Epoch {trainer.current_epoch}",
                unit="batch",
                disable=not trainer.is_global_zero,
                file=sys.stderr,
                dynamic_ncols=True,
                leave=True,
            )

    def on_train_batch_end(self, trainer, loss, batch_idx: int) -> None:
        self._batches += 1
        if self.bar is not None:
            self.bar.update(1)

    def on_train_step_end(self, trainer, loss) -> None:
        if not trainer.is_global_zero or trainer.global_step % self.refresh_every_n_steps:
            return
        recent = trainer.step_times[-self.refresh_every_n_steps :]
        self._show_loss(trainer)
        self._postfix["samples/s"] = f"{trainer.global_batch_size * len(recent) / max(sum(recent), 1e-9):.0f}"
        if self.bar is not None:
            self.bar.set_postfix(self._postfix, refresh=False)

    def _show_loss(self, trainer) -> None:
        # train/loss as logged: the mean over every rank's share (no device read, no collective here)
        if "train/loss" in trainer.logged_metrics:
            self._postfix["loss"] = f"{trainer.logged_metrics['train/loss']:.4f}"

    def on_validation_end(self, trainer, metrics: dict) -> None:
        # The task's own validation metrics, whatever they are called.
        self._postfix.update({name: f"{value:.4f}" for name, value in metrics.items() if name.startswith("val/")})
        if self.bar is not None:
            self.bar.set_postfix(self._postfix, refresh=True)

    def on_train_epoch_end(self, trainer) -> None:
        if self.plain and trainer.is_global_zero:
            self._show_loss(trainer)
            figures = "".join(f", {name} {value}" for name, value in self._postfix.items())
            # one write, line and newline together (a notebook's forked rank would send them as two outputs)
            sys.stderr.write(
                f"Epoch {trainer.current_epoch}: {self._batches}/{trainer.num_training_batches} batches, "
                f"{time.perf_counter() - self._epoch_start:.1f} s{figures}\n"
            )
            sys.stderr.flush()
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_exception(self, trainer, error: BaseException) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        self.on_fit_end(trainer)
