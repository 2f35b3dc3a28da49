"""A sweep that continues where it stopped: each job of the grid is known by its overrides, never by
its number, and is mapped to the directory of the sweep that already holds those overrides.

- completed (or diverged) with the config the command composes now: kept, not run again;
- interrupted, preempted or failed with ``checkpoints/last``: resumed from it (``ckpt_path=last``,
  as one run resumes);
- with a record but no checkpoint: run again afresh in its own directory (``overwrite=true``);
- not in the sweep yet: run in a new directory, numbered after the highest one there, so that no
  directory is ever reused for other overrides;
- a job whose saved config differs from what the command composes now: named, and the sweep refused
  (``ConflictingJobs``) before anything of it runs, so that it is neither reused nor overwritten.

The pure part, without Hydra: what the sweep directory holds (``past_jobs``) and the plan for a batch
of jobs (``plan``). ``hydra_plugins/framework_sweeper/study_launcher.py`` applies it to any launcher.
"""

# (No ``from __future__ import annotations``: Hydra's scan of hydra_plugins runs this module before it
# is in sys.modules, where a dataclass cannot resolve annotations given as strings.)
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence

from omegaconf import OmegaConf

from framework.engine.run_directory import previous_run
from framework.report.rows import job_dirs, job_overrides

# What a job does in this session of the sweep.
KEPT, RESUMED, AFRESH, NEW = "kept", "resumed", "afresh", "new"
# The Hydra override that puts a job into its directory (Hydra's default: the job's number).
SUBDIR = "hydra.sweep.subdir"
# A job that ended this way holds its result: kept while its config is the same.
FINISHED = ("completed", "diverged")
# Keys of a saved config that say where and how a job ran, not what it computes.
NOT_COMPARED = ("output_dir", "ckpt_path", "overwrite", "attempt")


def job_key(overrides: Iterable[str]) -> tuple[str, ...]:
    """A job's identity: its task overrides as ``key=value``, sorted, without Hydra's own (``hydra.*``)
    and without those that only say how it ran (``overwrite``, ``ckpt_path=last``: a resume adds them)."""
    overrides = list(overrides)
    kept = job_overrides({"overrides": overrides})
    deletions = [o for o in overrides if o.startswith("~") and "=" not in o]  # (~key: no value to keep)
    return tuple(sorted([f"{k}={v}" for k, v in kept.items()] + deletions))


@dataclass
class PastJob:
    """A job directory of the sweep, as it was left."""

    name: str
    path: Path
    overrides: list[str]
    status: Optional[str]  # results.json's (None: no results.json)
    has_last: bool  # checkpoints/last: it can resume
    has_record: bool  # results or checkpoints that a new run there would replace

    def saved_config(self) -> Optional[dict]:
        """The config the job was composed with (.hydra/config.yaml), unresolved; None without one."""
        path = self.path / ".hydra" / "config.yaml"
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False) if path.is_file() else None


def _recorded_overrides(job: Path) -> Optional[list[str]]:
    """The overrides a job ran with: .hydra/overrides.yaml, else results.json's ``job.overrides``."""
    saved = job / ".hydra" / "overrides.yaml"
    if saved.is_file():
        return [str(o) for o in OmegaConf.load(saved)]
    results = _results(job)
    overrides = (results.get("job") or {}).get("overrides")
    return [str(o) for o in overrides] if overrides is not None else None


def _results(job: Path) -> dict:
    try:
        return json.loads((job / "results.json").read_text())
    except (OSError, ValueError):
        return {}


def past_jobs(sweep_dir: Path) -> tuple[dict[tuple, PastJob], list[str]]:
    """The jobs ``sweep_dir`` holds, by ``job_key``; and every job directory's name (those whose
    overrides were never recorded too: a job killed while it was set up; their names stay taken)."""
    found: dict[tuple, PastJob] = {}
    names = []
    for job in job_dirs(sweep_dir) if sweep_dir.is_dir() else []:
        names.append(job.name)
        overrides = _recorded_overrides(job)
        if overrides is None:
            continue
        status = _results(job).get("status")
        found[job_key(overrides)] = PastJob(  # (two of the same key, from a sweep before: the later one)
            job.name,
            job,
            overrides,
            status,
            has_last=(job / "checkpoints" / "last").exists(),
            has_record=bool(previous_run(job)),
        )
    return found, names


@dataclass
class Planned:
    """One job of a batch: what it does now, in which directory, with which overrides."""

    overrides: list[str]  # as the sweeper gave them
    action: str  # KEPT, RESUMED, AFRESH or NEW
    name: str  # its directory in the sweep
    past: Optional[PastJob] = None
    differences: list[str] = field(default_factory=list)  # saved config -> composed now (a conflict)

    def launch_overrides(self) -> list[str]:
        """What the launcher gets: the job's own overrides, its directory, and how it continues."""
        how = {RESUMED: ["ckpt_path=last"], AFRESH: ["overwrite=true"]}.get(self.action, [])
        replaced = {o.split("=", 1)[0] for o in how}
        own = [o for o in self.overrides if o.lstrip("+").split("=", 1)[0] not in replaced]
        return [*own, *how, f"{SUBDIR}={self.name}"]


def action_of(past: PastJob, overwrite: bool) -> str:
    """What a job already in the sweep does (``overwrite``: the command set overwrite=true)."""
    if overwrite:
        return AFRESH if past.has_record else NEW
    if past.status in FINISHED:
        return KEPT
    if past.has_last:
        return RESUMED
    return AFRESH if past.has_record else NEW


def plan(
    batch: Sequence[Sequence[str]], past: dict[tuple, PastJob], taken: list[str], overwrite: bool = False
) -> list[Planned]:
    """Each job of ``batch`` mapped to its directory: the one holding its overrides, else a new
    number after the highest taken (``taken`` grows with those, for the next batch)."""
    planned = []
    for overrides in batch:
        job = past.get(job_key(overrides))
        if job is not None:
            planned.append(Planned(list(overrides), action_of(job, overwrite), job.name, job))
            continue
        name = str(max((int(n) for n in taken if n.isdigit()), default=-1) + 1)
        taken.append(name)
        planned.append(Planned(list(overrides), NEW, name))
    return planned


def differences(saved, now, prefix: str = "") -> list[str]:
    """``key: saved -> now`` for every value that differs between two config trees (the keys of
    ``NOT_COMPARED`` at the top left out)."""
    if isinstance(saved, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(saved) | set(now), key=str):
            if not prefix and key in NOT_COMPARED:
                continue
            out += differences(saved.get(key, _ABSENT), now.get(key, _ABSENT), f"{prefix}{key}.")
        return out
    return [] if saved == now else [f"{prefix[:-1]}: {_shown(saved)} -> {_shown(now)}"]


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT = _Absent()


def _shown(value) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def job_number(overrides: Sequence[str], default: int) -> int:
    """The job's number: its directory's, when the study put it there (``hydra.sweep.subdir=N``),
    else ``default`` (the launcher's count). A launcher that numbers its jobs with it runs a
    resumed sweep's jobs in one batch, whatever their numbers."""
    for override in overrides:
        key, _, value = override.lstrip("+").partition("=")
        if key == SUBDIR and value.isdigit():
            return int(value)
    return default


def conflict_message(sweep_dir: Path, conflicts: list[Planned], batch: list[Planned]) -> str:
    """The refusal of a sweep whose kept or resumable jobs ran with another config; each job named by
    the values that tell it from the others of ``batch``."""
    values = [job_overrides({"overrides": job.overrides}) for job in batch]
    varying = [k for k in dict.fromkeys(k for v in values for k in v) if len({v.get(k) for v in values}) > 1]
    lines = [
        f"hydra.sweep.dir: '{sweep_dir}' holds job(s) that ran with another config than this command "
        "composes; they are neither reused nor overwritten:"
    ]
    for job in conflicts:
        own = job_overrides({"overrides": job.overrides})
        what = " ".join(f"{k}={own.get(k)}" for k in varying) or "its overrides"
        shown = "; ".join(job.differences[:4])
        more = f"; ... ({len(job.differences)} in all)" if len(job.differences) > 4 else ""
        lines.append(f"  job {job.name} ({what}; {job.past.status or 'not finished'}): {shown}{more} (saved -> now)")
    lines.append(
        "Continue the study with the config it ran with, start a new study in another hydra.sweep.dir, "
        "or set overwrite=true to run every job of the grid again (replacing their results)."
    )
    return "\n".join(lines)
