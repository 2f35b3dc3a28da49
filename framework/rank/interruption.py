"""A run stopped by a signal: ``last`` holds its final step (saved here unless a checkpoint
callback did), and under SLURM with ``trainer.requeue`` the job requeues itself."""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
from pathlib import Path

from framework.config.experiment import Experiment
from framework.engine import signals
from framework.engine.checkpoint import save_checkpoint
from framework.engine.checkpoint_files import saved_step
from framework.engine.trainer import Trainer
from framework.strategies.comm.collectives import broadcast_object

log = logging.getLogger(__name__)


def record_interruption(run: Experiment, trainer: Trainer) -> dict:
    """Save ``last`` if needed (collective), log how to resume; returns results.json's fields."""
    strategy = trainer.strategy
    last = Path(run.output_dir) / "checkpoints" / "last"
    if broadcast_object(saved_step(last) if strategy.is_global_zero else None) != trainer.global_step:
        save_checkpoint(last, trainer)  # collective: every rank writes its shards
    name = signal.Signals(trainer.interrupted).name
    if strategy.is_global_zero:
        log.warning(
            "Interrupted by %s at step %d; %s holds it: resume with ckpt_path=last", name, trainer.global_step, last
        )
    out = {"status": "interrupted", "signal": name, "signal_number": trainer.interrupted, "checkpoint": str(last)}
    cause = signals.launcher_gone()
    if cause:
        out["cause"] = cause
    if trainer.interrupted == signal.SIGUSR1 and run.trainer.requeue and strategy.is_global_zero:
        out["requeued"] = requeue()
    return out


def stopped_after_training(run: Experiment, trainer: Trainer, signum: int) -> dict:
    """A stop signal after training ended (during the test, predict or the export): the stage was
    left at once; what training saved (``last``) stays, and nothing more is saved."""
    name = signal.Signals(signum).name
    last = Path(run.output_dir) / "checkpoints" / "last"
    if trainer.is_global_zero:
        log.warning(
            "Interrupted by %s after training (step %d), in the test or predict stage; %s",
            name,
            trainer.global_step,
            f"{last} holds the trained state" if last.exists() else "nothing was saved",
        )
    return {
        "status": "interrupted",
        "signal": name,
        "signal_number": signum,
        "steps": trainer.global_step,
        "after_training": True,
        "checkpoint": str(last) if last.exists() else None,
    }


def requeue() -> bool:
    """``scontrol requeue $SLURM_JOB_ID`` (FRAMEWORK_REQUEUE_COMMAND replaces it, e.g. in tests)."""
    job = os.environ.get("SLURM_ARRAY_JOB_ID", os.environ.get("SLURM_JOB_ID"))
    if job is None:
        log.warning("trainer.requeue: not inside a SLURM job (no SLURM_JOB_ID); not requeued")
        return False
    if "SLURM_ARRAY_TASK_ID" in os.environ:
        job = f"{job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    command = os.environ.get("FRAMEWORK_REQUEUE_COMMAND", "scontrol requeue {job_id}").format(job_id=job)
    done = subprocess.run(shlex.split(command), capture_output=True, text=True)
    log.log(
        logging.INFO if done.returncode == 0 else logging.ERROR,
        "Requeue (%s): exit %d %s",
        command,
        done.returncode,
        (done.stdout + done.stderr).strip(),
    )
    return done.returncode == 0
