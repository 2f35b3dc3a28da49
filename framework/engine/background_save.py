"""Checkpoints written in the background (``callbacks.model_checkpoint.async_save=true``).

At a save, every rank stages its model and optimizer shards to CPU memory (DCP's async_save)
and writes its small files (RNG, buffers, ``trainer.pt``) at once; training goes on while a
thread writes the shards. The checkpoint is committed as a synchronous one is (its manifest
written last, then one rename into place) by rank 0, once its thread is done, which DCP ends
only after every rank's shards are written. Until then it is a ``.tmp-`` directory that nothing
loads, and a write that fails leaves nothing: its files are removed and the error is raised
where the run next looks (the next save, a step, the end of fit), as a synchronous save's is.
"""

from __future__ import annotations

import datetime
import logging
import warnings
from pathlib import Path
from typing import Callable, Optional

import torch.distributed as dist

from framework.engine.checkpoint import checkpoint_about, commit, raise_save_failure, staging_dir, write_files

log = logging.getLogger(__name__)


def checkpoint_group(timeout_s: float):
    """A process group of its own for the writing threads' collectives (collective: every rank
    creates it, in the same order): sharing the training's group with another thread would
    interleave the two threads' collectives differently on different ranks. None without a group."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))


class PendingSave:
    """A checkpoint whose shards a thread is writing; ``then`` runs on rank 0 after the commit
    (the links a checkpoint callback makes to it: ``last``, ``best``)."""

    def __init__(self, path: Path, trainer, group, then: Optional[Callable[[], None]] = None):
        self.path = Path(path)
        self.tmp = staging_dir(self.path)
        self.is_global_zero = trainer.strategy.is_global_zero
        self.about = checkpoint_about(trainer)
        self.then = then
        if group is None:
            # One process saving is the intended case; the thread's DCP warns of it at every save,
            # outside any warnings context the caller could set (process-wide, that one message).
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        try:
            self.future = write_files(self.tmp, trainer, background=True, group=group)
        except BaseException as err:  # DCP's CheckpointException is a BaseException
            raise_save_failure(err, self.tmp, self.path, self.is_global_zero)

    def done(self) -> bool:
        return self.future.done()

    def finish(self) -> None:
        """Wait for the thread; commit (rank 0), or remove the partial files and raise its error."""
        try:
            self.future.result()
        except BaseException as err:
            log.error("Saving checkpoint %s in the background failed; it is not a checkpoint", self.path)
            raise_save_failure(err, self.tmp, self.path, self.is_global_zero)
        if self.is_global_zero:
            commit(self.tmp, self.path, self.about)
            log.info("Saved checkpoint %s (step %d, written in the background)", self.path, self.about["step"])
            if self.then is not None:
                self.then()
