"""The Hydra callback that ends every multirun with its report."""

from __future__ import annotations

import contextlib
import json
import logging
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from framework.engine.results import update_json, write_json
from framework.engine.run_directory import DirectoryBusy, DirectoryLock, previous_run
from framework.report.rows import SWEEP_FILE, collect, job_dirs, sweep_record
from framework.report.table import write_report

log = logging.getLogger(__name__)


class SweepReport(Callback):
    """Hydra callback: record the sweep's start, and write the report when the multirun ends."""

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:  # one sweep writes a sweep directory at a time, held until the sweep ends
            self._lock = DirectoryLock(sweep_dir, "hydra.sweep.dir").acquire()
        except DirectoryBusy as err:
            log.error("%s", err)
            print(err, file=sys.stderr)
            sys.exit(2)
        before = sweep_record(sweep_dir)
        if not config.get("overwrite"):
            taken = [p.name for p in job_dirs(sweep_dir) if previous_run(p)]
            refusal = taken and _not_continued(config, before)
            if refusal:  # before any job starts: the jobs would overwrite them one by one
                message = (
                    f"hydra.sweep.dir: '{sweep_dir}' already holds the results of jobs {', '.join(taken)} "
                    f"({refusal}); choose another hydra.sweep.dir, or set overwrite=true"
                )
                log.error(message)
                print(message, file=sys.stderr)
                self._lock.release()
                sys.exit(2)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        choices = OmegaConf.select(config, "hydra.runtime.choices", default={}) or {}
        now = time.time()
        write_json(
            sweep_dir / SWEEP_FILE,
            {
                "started_at": now,
                # a sweep continued in its directory: when its first session started, and which this is
                "first_started_at": before.get("first_started_at") or before.get("started_at") or now,
                "session": int(before.get("session") or (1 if before else 0)) + 1,
                "command": resume_command(sweep_dir),
                "overrides": list(OmegaConf.select(config, "hydra.overrides.task") or []),
                "launcher": choices.get("hydra/launcher"),
                "sweeper": choices.get("hydra/sweeper"),
                "optimized_metric": config.get("optimized_metric"),
                "optimized_mode": config.get("optimized_mode"),
            },
        )

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = finish_sweep(sweep_dir)
        refused = json.loads((sweep_dir / SWEEP_FILE).read_text()).get("refused_jobs", [])
        failed = [r["job"] for r in rows if r.get("status") == "failed" and r["job"] not in refused] + refused
        self._lock.release()
        if failed:  # the sweep's exit status: it ran to the end, but not every job did
            print(f"{len(failed)} job(s) failed: {', '.join(failed)}", file=sys.stderr)
            sys.exit(1)


# The framework's sweepers continue a sweep in its own directory (hydra_plugins/framework_sweeper/study.py).
CONTINUING_SWEEPERS = "hydra_plugins.framework_sweeper."


def _not_continued(config, before: dict) -> str | None:
    """Why a sweep directory that holds jobs is not continued by this sweep (None: it is)."""
    if not before:
        return "it is not a sweep's: no sweep.json"
    target = str(OmegaConf.select(config, "hydra.sweeper._target_", default="") or "")
    if not target.startswith(CONTINUING_SWEEPERS):
        return f"{target.rsplit('.', 1)[-1] or 'this sweeper'} does not continue a sweep; the framework's sweepers do"
    return None


def resume_command(sweep_dir: Path) -> str:
    """This process's command line, to run again into ``sweep_dir`` (absolute): how to continue the sweep."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", "") or ""
    program = f"python -m {name.removesuffix('.__main__')}" if name else Path(sys.argv[0]).name
    args = [a for a in sys.argv[1:] if not a.lstrip("+").startswith("hydra.sweep.dir=")]
    return " ".join([program, *map(shlex.quote, args), shlex.quote(f"hydra.sweep.dir={sweep_dir.resolve()}")])


def finish_sweep(sweep_dir: Path, stopped_by: int | None = None, never_started: list | None = None) -> list[dict]:
    """Record the sweep's end and write its report, from the jobs' results.json (so it holds
    whichever launcher ran them, and a sweep stopped by a signal: ``stopped_by``, with the jobs that
    ``never_started`` where the launcher knows them); returns the rows."""
    stop = {} if stopped_by is None else {"stopped_by_signal": stopped_by, "never_started": never_started}
    with signals_held():  # a stop that comes now waits for the report, then ends the launcher
        update_json(sweep_dir / SWEEP_FILE, finished_at=time.time(), **stop)
        rows = collect(sweep_dir)
        path = write_report(sweep_dir, rows)
    log.info("Sweep report: %s", Path(path).resolve())
    command = sweep_record(sweep_dir).get("command")
    if stopped_by is not None and command:
        log.warning("The sweep stopped; this command continues it (finished jobs kept): %s", command)
    return rows


# A sweep's report written whole: SIGTERM and SIGINT held while it is written (a second or two, the
# plots), then delivered as they came, so a sweep stopped as it ends still leaves report.md.
HELD = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def signals_held(signums=HELD):
    """Within it, ``signums`` wait; after it, each one that came is raised again, for the handler the
    process had (the default one: the launcher ends with its status, 128 + the signal)."""
    if threading.current_thread() is not threading.main_thread():  # (only the main thread handles signals)
        yield
        return
    came: list[int] = []
    previous = {s: signal.getsignal(s) for s in signums}
    for signum in signums:
        signal.signal(signum, lambda number, frame: came.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)
