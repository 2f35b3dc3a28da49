"""The launcher of a sweep that continues (study.py's plan, applied): the framework's sweepers hand
their launcher, whichever it is (basic, packed, joblib, SLURM), to ``StudyLauncher``, which runs only
the jobs that are not kept, each in the directory of its overrides.

A sweep into a directory that holds no job yet goes to the launcher as it is. In a sweep directory
that holds jobs, each job gets ``hydra.sweep.subdir=<its directory>``; a launcher that takes its
jobs' numbers from it (``takes_job_numbers``: packed, slurm) gets the whole batch at once, any other
one batch per run of consecutive numbers (so that ``hydra.job.num`` is the directory's number there too).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf, open_dict

from framework.engine.results import update_json
from framework.job.naming import set_job_fields
from framework.report.rows import SWEEP_FILE
from hydra_plugins.framework_sweeper.study import (
    AFRESH,
    KEPT,
    NEW,
    RESUMED,
    Planned,
    conflict_message,
    differences,
    past_jobs,
    plan,
)

log = logging.getLogger(__name__)

# What sweep.json's "study" lists for this session, in the order the report says it.
ACTIONS = (KEPT, RESUMED, AFRESH, NEW)


class StudyLauncher:
    """``launch`` as a Hydra launcher's, around ``launcher``: kept jobs answer from their results.json."""

    def __init__(self, launcher: Any, hydra_context: Any, config: Any) -> None:
        self.launcher, self.hydra_context, self.config = launcher, hydra_context, config
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.past: dict | None = None  # read at the first batch (the sweep directory is made by then)
        self.taken: list[str] = []

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        if self.past is None:
            self.past, self.taken = past_jobs(self.sweep_dir)
        if not self.taken:  # a new sweep: Hydra's numbering, as without this class
            _record(self.sweep_dir, {NEW: [str(initial_job_idx + i) for i in range(len(job_overrides))]})
            return self.launcher.launch(job_overrides, initial_job_idx)
        planned = plan(job_overrides, self.past, self.taken, overwrite=bool(self.config.get("overwrite")))
        configs = {i: self._compose(job) for i, job in enumerate(planned) if job.action in (KEPT, RESUMED)}
        conflicts = [job for i, job in enumerate(planned) if i in configs and self._conflicts(job, configs[i])]
        if conflicts:  # before any job of the batch runs
            print(conflict_message(self.sweep_dir, conflicts, planned), file=sys.stderr)
            sys.exit(2)
        _record(self.sweep_dir, {a: _names(planned, a) for a in ACTIONS})
        said = [f"{a} {', '.join(_names(planned, a))}" for a in ACTIONS if _names(planned, a)]
        log.info("Continuing the sweep in %s: %s", self.sweep_dir, "; ".join(said))
        returns: dict[int, JobReturn] = {
            i: _kept_return(job, configs[i]) for i, job in enumerate(planned) if job.action == KEPT
        }
        to_run = [i for i, job in enumerate(planned) if job.action != KEPT]
        for run in self._batches(to_run, planned):
            first = planned[run[0]].name
            launched = self.launcher.launch(
                [planned[i].launch_overrides() for i in run], int(first) if first.isdigit() else initial_job_idx
            )
            returns.update(zip(run, launched))
        return [returns[i] for i in range(len(planned))]

    def _batches(self, to_run: list[int], planned: list[Planned]) -> list[list[int]]:
        """The jobs to run in one launch each: all at once for a launcher that numbers its jobs from
        their directories, else runs of consecutive numbers (the job's number is then its directory's)."""
        if not to_run or getattr(self.launcher, "takes_job_numbers", False):
            return [to_run] if to_run else []
        batches: list[list[int]] = []
        for i in to_run:
            previous = planned[batches[-1][-1]].name if batches else None
            if previous is not None and previous.isdigit() and planned[i].name == str(int(previous) + 1):
                batches[-1].append(i)
            else:
                batches.append([i])
        return batches

    def _compose(self, job: Planned):
        """The job's config as the launcher will compose it (Hydra's part apart), to compare with the saved one."""
        sweep_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(job.overrides))
        with open_dict(sweep_config):
            choices = OmegaConf.to_container(sweep_config.hydra.runtime.choices)
            task_overrides = list(sweep_config.hydra.overrides.task)
            del sweep_config["hydra"]
        set_job_fields(sweep_config, None, choices, task_overrides)
        return sweep_config

    def _conflicts(self, job: Planned, composed) -> bool:
        saved = job.past.saved_config() if job.past else None
        if saved is None:  # nothing to compare with: it runs (resumed) or stays (kept) as recorded
            return False
        job.differences = differences(saved, OmegaConf.to_container(composed, resolve=False))
        return bool(job.differences)


def _names(planned: list[Planned], action: str) -> list[str]:
    """The directories of the jobs that do ``action``, by number."""
    names = [job.name for job in planned if job.action == action]
    return sorted(names, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n))


def _kept_return(job: Planned, composed) -> JobReturn:
    """A kept job's return, as if it had run: its recorded value of ``optimized_metric`` (what a sweeper such as
    Optuna is told)."""
    results = json.loads((job.past.path / "results.json").read_text())
    metric = composed.get("optimized_metric") or "val/loss"
    return JobReturn(
        overrides=list(job.overrides),
        cfg=composed,
        working_dir=os.getcwd(),
        task_name=job.name,
        status=JobStatus.COMPLETED,
        _return_value=(results.get("metrics") or {}).get(metric),
    )


def _record(sweep_dir: Path, actions: dict[str, list[str]]) -> None:
    """This session's jobs in sweep.json's ``study``, batch after batch (the report says them)."""
    path = sweep_dir / SWEEP_FILE
    study = (json.loads(path.read_text()).get("study") if path.exists() else None) or {}
    for action, names in actions.items():
        study[action] = [*study.get(action, []), *names]
    update_json(path, study=study)
