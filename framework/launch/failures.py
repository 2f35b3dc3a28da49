"""A launched job that failed or stopped: what rank 0 wrote, and the record of which rank
failed first and why (results.json, with what survived and how to resume)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from framework.config.errors import ConfigError
from framework.config.experiment import Experiment
from framework.engine.attempts import attempt_dir
from framework.engine.checkpoint_files import resolve_ckpt_path, saved_step
from framework.engine.results import job_record, write_results

log = logging.getLogger(__name__)


def read_results(run: Experiment) -> dict:
    """What this attempt's rank 0 wrote (engine/attempts.py), or nothing."""
    path = attempt_dir(Path(run.output_dir), run.attempt) / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


# What a rank records of a stop signal (rank/interruption.py).
_STOP_FIELDS = ("signal", "signal_number", "after_training", "cause", "requeued")


class JobFailed(RuntimeError):
    """A rank failed; results.json and the log say which and why (the command line prints this
    message, not a traceback through the launcher: the rank's own traceback is in its log)."""


def job_failed(run: Experiment, nprocs: int, rank: int, message: str) -> JobFailed | ConfigError:
    """Record in results.json which rank failed first and why (with the job's fields, whichever
    rank wrote what before); return the error to raise (the config's problems, where a rank's work
    found them before its first step)."""
    run_dir = Path(run.output_dir)
    written = read_results(run)  # rank 0's record of this run, unless it kept a finished one's
    if written.get("status") in ("completed", "diverged") and not run.attempt:
        failed = run_dir / "results.failed.json"
        written = json.loads(failed.read_text()) if failed.exists() else {}
    if written.get("status") == "interrupted":  # rank 0 took the teardown's SIGTERM for a stop: it was not one
        written = {k: v for k, v in written.items() if k not in _STOP_FIELDS}
    if written.get("failed_rank") not in (None, rank):  # rank 0's traceback is of losing the rank that failed
        written = {k: v for k, v in written.items() if k != "traceback"}
    results = {**job_record(run, run.strategy["name"], nprocs), **written}
    last = resolve_ckpt_path("last", str(run_dir))
    step = saved_step(last)
    if step is not None:  # what survives the failure, and how to go on from it
        results.update(checkpoint=str(last), checkpoint_step=step)
        message += f"; {last} holds step {step}: resume with ckpt_path=last"
    results.update(status="failed", failed_rank=rank, error=message)
    write_results(run_dir, results, run.attempt)
    if written.get("problems"):  # refused where the ranks' work found it (the data as read): as before start
        return ConfigError(written["problems"])
    log.error("rank %d failed first: %s", rank, message)  # the verdict, in the job's train.log too
    return JobFailed(f"rank {rank} failed: {message}")
