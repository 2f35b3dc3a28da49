"""A run directory's attempts: every start of a run in the same directory (a resume, a requeue)
is one, and none of them may damage the record of the ones before.

The first attempt writes its record (config.yaml, .hydra/, metrics.csv, results.json) at the top of
the run directory. A later attempt n writes its own under ``attempts/<n>/`` (its metrics continuing
the rows of the attempt it resumes) and takes the top only when it ends, completed, diverged or
interrupted (``promote``): an attempt that fails, wherever (the data, the model, the checkpoint, a
killed rank or launcher), leaves the top record byte for byte as it was. Before the first later
attempt, the top record is kept as ``attempts/1/``, so every attempt's config and results stay,
numbered.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Optional

ATTEMPTS = "attempts"
# The files of an attempt's record, beside its results.json (config.yaml first: the top's says which
# attempt holds it).
RECORD_FILES = ("config.yaml", ".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "metrics.csv")
# How an attempt ends that makes its record the run's (a failure leaves the run's as it was).
PROMOTED = ("completed", "diverged", "interrupted")
_ATTEMPT_LINE = re.compile(r"^attempt: *(\d+) *$", re.MULTILINE)


def attempt_dir(run_dir: Path, attempt: Optional[int]) -> Path:
    """Where attempt ``attempt`` (None: the first) writes its record."""
    return Path(run_dir) / ATTEMPTS / str(attempt) if attempt else Path(run_dir)


def next_attempt(run_dir: Path) -> Optional[int]:
    """The number of a new attempt in ``run_dir`` (None: the first, nothing recorded there yet).
    Keeps the top record as ``attempts/1/`` when no attempt did so yet."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        return None
    attempts = run_dir / ATTEMPTS
    numbers = [int(p.name) for p in attempts.iterdir() if p.name.isdigit()] if attempts.is_dir() else []
    if not numbers:
        _copy_record(run_dir, attempt_dir(run_dir, 1))
        numbers = [1]
    return max(numbers) + 1


def holds_the_top(run_dir: Path, attempt: Optional[int]) -> bool:
    """Whether attempt ``attempt``'s record is the top one: the first attempt's always, a later
    one's once it was promoted (the top config.yaml names it)."""
    if not attempt:
        return True
    try:
        match = _ATTEMPT_LINE.search((Path(run_dir) / "config.yaml").read_text())
    except OSError:
        return False
    return bool(match) and int(match.group(1)) == attempt


def promote(run_dir: Path, attempt: Optional[int]) -> None:
    """Attempt ``attempt`` ended (``PROMOTED``): its config, .hydra/ and metrics become the top record;
    the previous top's are in their own ``attempts/<n>/``. results.json follows (engine/results.py)."""
    if not attempt or holds_the_top(run_dir, attempt):
        return
    source = attempt_dir(run_dir, attempt)
    for name in RECORD_FILES[1:] + RECORD_FILES[:1]:  # config.yaml last: it says the promotion is done
        if (source / name).is_file():
            _copy_atomically(source / name, Path(run_dir) / name)


def lineage_file(run_dir: Path, name: str, attempt: Optional[int]) -> Path:
    """The newest ``name`` (metrics.csv) of the run's record and its earlier attempts': what attempt
    ``attempt`` continues (one that ended unpromoted, killed, may have trained further than the top)."""
    candidates = [Path(run_dir) / name]
    attempts = Path(run_dir) / ATTEMPTS
    if attempts.is_dir():
        candidates += [p / name for p in attempts.iterdir() if p.name.isdigit() and int(p.name) != attempt]
    found = [p for p in candidates if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns) if found else candidates[0]


def _copy_record(source: Path, target: Path) -> None:
    for name in (*RECORD_FILES, "results.json"):
        if (source / name).is_file():
            _copy_atomically(source / name, target / name)


def _copy_atomically(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copy2(source, tmp)  # with its times: an archived record stays as old as it is
    os.replace(tmp, target)
