"""<sweep>/tensorboard: a link per job to its TensorBoard event directory, named after the keys the
sweep varied (``strategy=ddp,trainer.devices=2``), so that ``tensorboard --logdir <sweep>/tensorboard``
names its runs after what differs between them, not ``0/tb``, ``3/tb``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from framework.report.compare import swept_keys
from framework.report.rows import job_path

RUNS_DIR = "tensorboard"


def link_tensorboard_runs(sweep_dir: Path, rows: list[dict]) -> Optional[Path]:
    """(Re)write ``sweep_dir/tensorboard``; returns it, or None when no job wrote events."""
    runs = _runs(sweep_dir, rows)
    if not runs:
        return None
    links = sweep_dir / RUNS_DIR
    links.mkdir(exist_ok=True)
    for old in links.iterdir():
        if old.is_symlink():  # what an earlier report linked; nothing else there is touched
            old.unlink()
    for name, events_dir in runs.items():
        # relative, so that the sweep directory can be moved or copied as a whole
        (links / name).symlink_to(os.path.relpath(events_dir, links), target_is_directory=True)
    return links


def _runs(sweep_dir: Path, rows: list[dict]) -> dict[str, Path]:
    keys, runs = swept_keys(rows), {}
    for row in rows:
        job_dir = job_path(row, sweep_dir)
        event_dirs = sorted({p.parent for p in job_dir.rglob("events.out.tfevents.*")}) if job_dir.is_dir() else []
        overrides = row.get("overrides") or {}
        name = ",".join(f"{k}={overrides[k]}" for k in keys if k in overrides) or f"job {row['job']}"
        name = name.replace(os.sep, "_")
        for events_dir in event_dirs:
            run = name if len(event_dirs) == 1 else f"{name} {events_dir.relative_to(job_dir)}".replace(os.sep, "_")
            runs[run if run not in runs else f"{run} (job {row['job']})"] = events_dir
    return runs
