"""ModelCheckpoint: top-k by a monitored metric, ``last``, every N epochs or N optimizer steps."""

from __future__ import annotations

import logging
import math
import os
import re
import string
from pathlib import Path
from typing import Literal, Optional

from framework.config.ranges import ArgumentRanges, Range
from framework.engine.background_save import PendingSave, checkpoint_group
from framework.engine.checkpoint import link_checkpoint, save_checkpoint
from framework.engine.checkpoint_files import remove_entry, remove_leftovers
from framework.strategies.comm.collectives import barrier

log = logging.getLogger(__name__)


# A checkpoint's name is a file name inside ``dirpath``: these are the framework's own there.
RESERVED_NAMES = ("last", "best")


# A logged metric as a name field: its namespace (train/, val/, test/, lr-..., throughput/, device/), '/' as '_'.
_METRIC_FIELD = re.compile(r"^(train|val|test|throughput|device)_[A-Za-z0-9_]+$|^lr-[A-Za-z0-9_\-]+$")


class _Fields(dict):
    def __missing__(self, key):  # a metric not logged yet formats as nan rather than failing
        return float("nan")


class ModelCheckpoint:
    """Lightning's ModelCheckpoint, for checkpoint directories (see framework.engine.checkpoint).

    ``filename`` is formatted with ``epoch``, ``step`` and every logged metric, '/' read as
    '_' (``val/loss`` -> ``{val_loss:.4f}``). With ``monitor`` null the newest
    ``save_top_k`` are kept. ``best`` (a link to the best checkpoint) and ``last`` live beside
    them, for ``ckpt_path=best|last``. Every rank calls save (it is collective); the metrics
    are already reduced, so every rank makes the same decision. ``async_save``: the shards are
    staged to CPU at the save and written in the background (engine/background_save.py); the
    checkpoint and its links appear once written, and a failed write fails the run as a
    synchronous one does.
    """

    argument_ranges = {
        "save_top_k": Range(low=-1, note=" (-1: keep every checkpoint, 0: none)"),
        "every_n_epochs": Range(low=0, note=" (or null)"),
        "every_n_train_steps": Range(low=0, note=" (or null)"),
    }

    def __init__(
        self,
        dirpath: str,
        filename: str = "epoch{epoch}-step{step}",
        monitor: Optional[str] = None,
        mode: Literal["min", "max"] = "min",
        save_top_k: int = 1,
        save_last: bool = True,
        every_n_epochs: Optional[int] = None,
        every_n_train_steps: Optional[int] = None,
        async_save: bool = False,
    ):
        if mode not in ("min", "max"):
            raise ValueError(f"callbacks.model_checkpoint.mode: {mode!r} is not one of 'min', 'max'")
        ArgumentRanges.of(ModelCheckpoint).check(
            {"save_top_k": save_top_k, "every_n_epochs": every_n_epochs, "every_n_train_steps": every_n_train_steps},
            "callbacks.model_checkpoint",
        )
        problems = self.check_config(filename, monitor)
        if problems:
            raise ValueError("; ".join(f"callbacks.model_checkpoint.{p}" for p in problems))
        self.dirpath = Path(dirpath)
        self.filename, self.monitor, self.mode = filename, monitor, mode
        self.save_top_k, self.save_last = save_top_k, save_last
        self.every_n_train_steps = every_n_train_steps
        self.every_n_epochs = every_n_epochs if every_n_epochs is not None else (None if every_n_train_steps else 1)
        self.best_k: dict[str, float] = {}  # checkpoint name -> score (or step when no monitor)
        self.best_model_path: Optional[str] = None
        self._last_saved_step = -1
        self._warned = False
        self.async_save = async_save
        self._pending: Optional[PendingSave] = None
        self._group = None  # the writing threads' process group, made at the first background save

    @classmethod
    def check_config(cls, filename: str = "epoch{epoch}-step{step}", monitor: Optional[str] = None, **_) -> list[str]:
        """The file name template, checked before any process starts (keys relative to this node), by
        ``__init__`` and of a resumed state's names: ``filename`` names a directory inside ``dirpath`` (no
        separator, no ``..``, not hidden, not ``last``/``best``) and formats only ``epoch``, ``step`` and
        metric names (``val/loss`` as ``val_loss``)."""
        if not isinstance(filename, str) or not filename:
            return [f"filename: expected a name template like 'epoch{{epoch}}-step{{step}}', got {filename!r}"]
        problems = []
        if (
            "/" in filename
            or "\\" in filename
            or os.sep in filename
            or filename.startswith(".")
            or filename in RESERVED_NAMES
        ):
            problems.append(
                f"filename: {filename!r} is not a plain file name; a checkpoint is named inside dirpath (no "
                f"'/', no '..', not hidden, not {' or '.join(RESERVED_NAMES)}): change dirpath to move them"
            )
        try:
            fields = [name for _, name, _, _ in string.Formatter().parse(filename) if name is not None]
        except ValueError as err:
            return problems + [f"filename: {filename!r} is not a valid template: {err}"]
        for name in fields:
            if not _METRIC_FIELD.match(name) and name not in ("epoch", "step"):
                known = sorted(
                    {"epoch", "step", "val_loss", "train_loss", *([monitor.replace("/", "_")] if monitor else [])}
                )
                problems.append(
                    f"filename: {{{name}}} is not a field of a checkpoint's name; fields: {', '.join(known)} "
                    f"and any other logged metric, '/' read as '_' (val/acc -> {{val_acc}})"
                )
        return problems

    # ---- events
    def on_fit_start(self, trainer) -> None:
        if trainer.is_global_zero:
            remove_leftovers(self.dirpath)

    def on_train_step_end(self, trainer, loss) -> None:
        if self._pending is not None and self._pending.done():
            self._finish_pending()  # commit as soon as it is written, not at the next save
        n = self.every_n_train_steps
        if n and trainer.global_step % n == 0:
            self._save(trainer)

    def on_validation_end(self, trainer, metrics: dict) -> None:
        # Mid-epoch validation (val_check_interval < 1) with a monitor: save right away.
        # At the end of an epoch the save waits for on_train_epoch_end, once the epoch's
        # scheduler step is done, so that resuming from it continues exactly.
        mid_epoch = trainer.state.batch_in_epoch < trainer.num_training_batches
        if self.monitor and self.every_n_epochs and mid_epoch:
            self._save(trainer)

    def on_train_epoch_end(self, trainer) -> None:
        # an epoch cut short (a stop signal, max_steps) is not one to rank: its metrics are the last
        # validation's or none; `last` holds its state (on_fit_end, or the interruption's own save)
        n = self.every_n_epochs
        if n and trainer.state.epoch_finished and (trainer.current_epoch + 1) % n == 0:
            self._save(trainer)

    def on_fit_end(self, trainer) -> None:
        self._settle_pending()
        # The final weights are in `last` even when the run stopped between save points.
        if (
            self.save_last
            and self._last_saved_step != trainer.global_step
            and trainer.global_step > 0
            and trainer.check_finite()
        ):
            self._write(trainer, "last", [], background=False)  # training is over: nothing to overlap

    # ---- state (for resume)
    def state_dict(self) -> dict:
        return {"best_k": self.best_k, "best_model_path": self.best_model_path}

    def load_state_dict(self, state: dict) -> None:
        # only names inside dirpath: a checkpoint's state never makes this callback delete elsewhere
        self.best_k = {name: score for name, score in dict(state["best_k"]).items() if not self.check_config(name)}
        self.best_model_path = state["best_model_path"]

    # ---- internals
    def _score(self, trainer) -> Optional[float]:
        if not self.monitor:
            return float(trainer.global_step)
        value = trainer.logged_metrics.get(self.monitor)
        if value is None and not self._warned:
            self._warned = True
            log.warning(
                "callbacks.model_checkpoint.monitor: %r has not been logged (logged: %s); "
                "saving only 'last' until it is",
                self.monitor,
                sorted(trainer.logged_metrics),
            )
        return value

    def _key(self, score: float) -> float:
        """Sort key, lower is better: the metric for mode=min, its negation for max, and
        the negated step without a monitor (the newest is best). NaN is worst."""
        if math.isnan(score):
            return math.inf
        return score if (self.monitor and self.mode == "min") else -score

    def _save(self, trainer) -> None:
        if trainer.global_step == self._last_saved_step or not trainer.check_finite():
            return  # saved already, or the weights are not finite: `last` and `best` keep good ones
        self._settle_pending()
        name, after = self._top_k_update(trainer)
        if self.save_last:
            if name:  # the same state: `last` shares its files instead of writing them twice
                step = trainer.global_step
                after.append(lambda: self._link_last(name, step))
            else:
                name = "last"
        if name:
            self._write(trainer, name, after, self.async_save)
        self._last_saved_step = trainer.global_step

    def _top_k_update(self, trainer) -> tuple[Optional[str], list]:
        """The name to save under when this state enters the top k (else None), and what rank 0
        does once it is saved: the checkpoint it pushed out removed, ``best`` linked."""
        score = self._score(trainer)
        if self.save_top_k == 0 or score is None:
            return None, []
        fields = _Fields({k.replace("/", "_"): v for k, v in trainer.logged_metrics.items()})
        fields.update(epoch=trainer.current_epoch, step=trainer.global_step)
        name = self.filename.format_map(fields)  # a metric not logged yet reads nan
        worst = max(self.best_k, key=lambda k: self._key(self.best_k[k]), default=None)
        full = 0 < self.save_top_k <= len(self.best_k)
        if full and self._key(score) >= self._key(self.best_k[worst]):
            return None, []
        # Record the new top-k before writing: the checkpoint carries this state.
        self.best_k[name] = score
        if full:
            del self.best_k[worst]
        best = min(self.best_k, key=lambda k: self._key(self.best_k[k]))
        self.best_model_path = str(self.dirpath / best)
        after = [lambda: remove_entry(self.dirpath / worst)] if full else []
        return name, [*after, lambda: self._link_best(best)]

    def _write(self, trainer, name: str, after: list, background: bool) -> None:
        """Save under ``name``, then let rank 0 do ``after``: now, or once written in the background."""

        def then() -> None:
            for action in after:
                action()

        if background:
            if self._group is None:
                self._group = checkpoint_group(trainer.strategy.options.timeout_s)
            self._pending = PendingSave(self.dirpath / name, trainer, self._group, then)
            return
        save_checkpoint(self.dirpath / name, trainer)
        if trainer.is_global_zero:
            log.info("Saved checkpoint %s (step %d)", self.dirpath / name, trainer.global_step)
            then()
        barrier()

    def _finish_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.finish()

    def _settle_pending(self) -> None:
        """At a point every rank reaches together: the background save finished on every rank, and
        committed by rank 0 before any rank goes on (to load ``best``, say)."""
        if self.async_save:
            self._finish_pending()
            barrier()

    def _link_last(self, saved: str, step: int) -> None:
        link_checkpoint(self.dirpath / saved, self.dirpath / "last")
        log.info("Saved checkpoint %s (step %d, the files of %s)", self.dirpath / "last", step, saved)

    def _link_best(self, best: str) -> None:
        """Rank 0: `best` is a relative symlink, replaced atomically."""
        tmp = self.dirpath / ".best-link"
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        os.symlink(best, tmp)
        if not (self.dirpath / "best").is_symlink():  # a copy of the run made `best` a directory
            remove_entry(self.dirpath / "best")
        os.replace(tmp, self.dirpath / "best")
