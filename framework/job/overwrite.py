"""The run directory before a run starts: a previous run there is refused, resumed, or (with
``overwrite``) replaced, so that nothing already written is lost by accident."""

from __future__ import annotations

import os
from pathlib import Path

from framework.config.experiment import Experiment
from framework.engine.checkpoint_files import resolve_ckpt_path
from framework.engine.run_directory import RUN_OUTPUTS, previous_run


def replaces_previous_run(run: Experiment) -> list[str]:
    """With ``overwrite``, the outputs of a previous run in ``output_dir`` that this run replaces
    (not when it resumes that run or is a restart of its own job)."""
    output_dir = run.output_dir
    if not output_dir or not run.overwrite or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return []
    if not previous_run(Path(output_dir)) or _resumes_it(run):
        return []
    return [name for name in RUN_OUTPUTS if (Path(output_dir) / name).exists()]


def check_output_dir(run: Experiment) -> list[str]:
    """A run must not overwrite another run's results and checkpoints, unless it resumes that
    run (a ckpt_path inside it) or ``overwrite`` says so. (framework.evaluate writes to a
    directory of its own inside the run.)"""
    output_dir = run.output_dir
    if not output_dir or run.overwrite or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return []  # (a torchrun restart continues its own run)
    found = previous_run(Path(output_dir))
    if not found or _resumes_it(run):
        return []
    return [
        f"output_dir: '{output_dir}' already holds a run ({', '.join(found)}) that this run would overwrite; "
        f"resume it with ckpt_path=last, choose another directory (hydra.run.dir=...), or set overwrite=true"
    ]


def _resumes_it(run: Experiment) -> bool:
    """Whether ``ckpt_path`` names a checkpoint inside the run's directory."""
    if not run.ckpt_path:
        return False
    directory = Path(run.output_dir).resolve()
    return directory in resolve_ckpt_path(str(run.ckpt_path), run.output_dir).resolve().parents
