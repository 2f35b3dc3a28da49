"""``hydra/launcher=packed``: the sweep's jobs run side by side, each on devices of its own.

The launcher knows this machine's devices (CUDA devices, else CPU cores), starts each job as
soon as enough of them are free (the largest first, no job starved: schedule.py), and holds
the job to its devices (framework/launch/packed_devices.py). Hydra's job numbers, job directories and the sweep report
stay as the basic launcher leaves them; ``<sweep dir>/packing.json`` records which devices each
job had, when, and which jobs ran beside it (the report flags those jobs' throughput).

A stop signal (SIGTERM, SIGINT) goes on to every running job, which records itself interrupted
with ``checkpoints/last``; no waiting job starts; the report is written and the sweep exits
128 + the signal, as a sweep under the basic launcher does.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.utils import JobReturn, configure_log, filter_overrides, setup_globals
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf, open_dict

from framework.launch.main_module import ranks_without_main
from framework.launch.packed_devices import max_skips_problem, pool
from framework.launch.packed_job import failed_return, run_packed_job, run_served_job, task_name
from framework.launch.servers import JOB_MODULES, start_job_server
from hydra_plugins.framework_packed.schedule import DevicePool, Pending, largest_first

log = logging.getLogger(__name__)


class PackedLauncher(Launcher):
    # A continued sweep's jobs keep their directories' numbers (hydra.sweep.subdir): one batch, any numbers.
    takes_job_numbers = True

    def __init__(self, kind: str = "auto", devices: Any = None, max_skips: Optional[int] = None) -> None:
        self.kind, self.devices, self.max_skips = kind, devices, max_skips
        self.config = self.hydra_context = self.task_function = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        try:
            kind, ids = pool(
                self.kind, OmegaConf.to_container(self.devices) if OmegaConf.is_config(self.devices) else self.devices
            )
            problem = max_skips_problem(self.max_skips)
            if problem:
                raise ValueError(problem)
        except ValueError as err:  # before any job starts: the key, the valid choices; once (no log line beside it)
            print(err, file=sys.stderr)
            sys.exit(2)
        task = task_name(self.task_function)
        if task:  # the server imports while this process composes the jobs (started here unless it runs)
            start_job_server()
        from hydra_plugins.framework_sweeper.study import job_number  # (not at the console's start: --help)

        configs = [
            self._job_config(job_number(overrides, initial_job_idx + i), overrides)
            for i, overrides in enumerate(job_overrides)
        ]
        if not task:
            _preload()
        log.info("Launching %d jobs packed onto %d %s device(s) %s", len(configs), len(ids), kind, ids)
        run = _PackedRun(self, kind, DevicePool(ids, max_skips=self.max_skips or 0), sweep_dir, task)
        returns = run.all(configs)
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return returns

    def _job_config(self, num: int, overrides: Sequence[str]):
        log.info("\t#%d : %s", num, " ".join(filter_overrides(overrides)))
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(sweep_config):
            sweep_config.hydra.job.id = num
            sweep_config.hydra.job.num = num
        return sweep_config


def _preload() -> None:
    """Jobs forked from this process: what they import, imported once here, before they fork
    (importing starts no threads)."""
    import importlib

    for name in JOB_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - an optional module: the job imports it itself, or does without
            pass


def _need(sweep_config, available: int) -> int:
    """The devices a job asks for (trainer.devices; an invalid value is the job's own to refuse)."""
    devices = OmegaConf.select(sweep_config, "trainer.devices", default=1)
    need = devices if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0 else 1
    return min(need, available)


class _PackedRun:
    """One batch of jobs (a grid, or one of a sweeper's batches) from start to its last job's end."""

    def __init__(self, launcher: PackedLauncher, kind: str, devices: DevicePool, sweep_dir: Path, task) -> None:
        self.launcher, self.kind, self.devices, self.sweep_dir = launcher, kind, devices, sweep_dir
        self.task = task  # the task function's name: jobs start from the job server; None: forked from here
        self.running: dict[int, tuple] = {}  # job index -> (process, its pipe's end, Pending, config)
        self.returns: dict[int, JobReturn] = {}
        self.records: dict[int, dict] = {}
        self.signum: Optional[int] = None
        self.warmed = False  # the report's plotting loaded ahead of it

    def all(self, configs: list) -> list[JobReturn]:
        waiting = largest_first(
            [Pending(int(c.hydra.job.num), _need(c, len(self.devices.devices)), i) for i, c in enumerate(configs)]
        )
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            while self.running or (waiting and self.signum is None):  # after a stop signal, no job starts
                if self.signum is None:
                    for job, devices in self.devices.next_jobs(waiting):
                        self._start(configs[job.index], job, devices)
                self._wait_for_one()
                if not waiting and self.running and not self.warmed and self.devices.free:
                    self._warm_report()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._write_packing()
        if self.signum is not None:
            self._end_stopped_sweep(sorted(job.num for job in waiting))
        return [self.returns[i] for i in range(len(configs))]

    def _start(self, sweep_config, job: Pending, devices: list[int]) -> None:
        context = multiprocessing.get_context("forkserver" if self.task else "fork")
        parent_end, child_end = context.Pipe(duplex=False)
        launcher = self.launcher
        if self.task:
            target = run_served_job
            args = (child_end, self.task, sweep_config, self.kind, devices, dict(os.environ), os.getpid())
        else:
            args = (child_end, launcher.hydra_context, launcher.task_function, sweep_config, self.kind, devices)
            target = run_packed_job
        process = context.Process(target=target, name=f"packed-job-{job.num}", args=args)
        with ranks_without_main():  # the job needs nothing of this process's __main__ (the console script)
            process.start()
        child_end.close()
        self.running[job.index] = (process, parent_end, job, sweep_config)
        self.records[job.num] = {"devices": devices, "pid": process.pid, "started_at": time.time()}
        log.info("job #%d started on %s %s (pid %d)", job.num, self.kind, devices, process.pid)

    def _wait_for_one(self) -> None:
        """Until a job ends (or a signal arrives): its return, its devices back."""
        ended = wait([process.sentinel for process, *_ in self.running.values()], timeout=0.5)
        for index, (process, conn, job, sweep_config) in list(self.running.items()):
            if process.sentinel not in ended:
                continue
            ret = conn.recv() if conn.poll() else None
            process.join()
            conn.close()
            del self.running[index]
            self.devices.give_back(self.records[job.num]["devices"])
            self.records[job.num].update(ended_at=time.time(), exitcode=process.exitcode)
            self.returns[index] = (
                ret
                if ret is not None
                else failed_return(
                    sweep_config,
                    RuntimeError(f"the job's process ended with exit code {process.exitcode} before it answered"),
                )
            )

    def _warm_report(self) -> None:
        """The last jobs run and a device is idle: load the report's plotting now, not after them."""
        from framework.report.plots import warm_up

        self.warmed = True
        try:
            warm_up()
        except Exception as err:  # noqa: BLE001 - the report itself says what went wrong, if anything does
            log.debug("warming the report's plots failed: %s", err)

    def _stop(self, signum, frame) -> None:
        """Every running job gets the signal (a copy of one the process group had counts as the same stop)."""
        first = self.signum is None
        self.signum = self.signum or signum
        log.warning(
            "signal %d: %s the running jobs %s",
            signum,
            "stopping" if first else "passed on again to",
            sorted(job.num for _, _, job, _ in self.running.values()),
        )
        for process, *_ in self.running.values():
            if process.is_alive():
                os.kill(process.pid, signum)

    def _write_packing(self) -> None:
        from framework.report.rows import PACKING_FILE

        path = self.sweep_dir / PACKING_FILE
        packing = json.loads(path.read_text()) if path.exists() else {"jobs": {}}
        for num, record in self.records.items():
            end = record.get("ended_at") or time.time()
            record["beside"] = sorted(
                other
                for other, r in self.records.items()
                if other != num and r["started_at"] < end and (r.get("ended_at") or time.time()) > record["started_at"]
            )
        packing["jobs"].update({str(num): record for num, record in self.records.items()})
        packing.update(kind=self.kind, devices=self.devices.devices)
        path.write_text(json.dumps(packing, indent=2) + "\n")

    def _end_stopped_sweep(self, never_started: list[int]) -> None:
        from framework.report import finish_sweep

        finish_sweep(self.sweep_dir, stopped_by=self.signum, never_started=never_started)
        log.error(
            "sweep stopped by signal %d: its running jobs were interrupted, the report covers the jobs so far",
            self.signum,
        )
        sys.exit(128 + self.signum)
