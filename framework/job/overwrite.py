"""The run directory before a run starts: a previous run there is refused, resumed, or (with
``overwrite``) replaced, so that nothing already written is lost by accident."""

from __future__ import annotations

import os
from pathlib import Path

from framework.engine.checkpoint_files import resolve_ckpt_path
from framework.engine.run_directory import RUN_OUTPUTS, previous_run


def replaces_previous_run(container: dict) -> list[str]:
    """With ``overwrite``, the outputs of a previous run in ``output_dir`` that this run replaces
    (not when it resumes that run or is a restart of its own job)."""
    output_dir = container.get("output_dir")
    if not output_dir or not container.get("overwrite") or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return []
    ckpt = container.get("ckpt_path")
    if not previous_run(Path(output_dir)) or (
        ckpt and _inside(resolve_ckpt_path(str(ckpt), output_dir), Path(output_dir))
    ):
        return []
    return [name for name in RUN_OUTPUTS if (Path(output_dir) / name).exists()]


def check_output_dir(container: dict) -> list[str]:
    """A run must not overwrite another run's results and checkpoints, unless it resumes that
    run (a ckpt_path inside it) or ``overwrite`` says so. (framework.evaluate writes to a
    directory of its own inside the run.)"""
    output_dir = container.get("output_dir")
    if not output_dir or container.get("overwrite") or int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")):
        return []  # (a torchrun restart continues its own run)
    found = previous_run(Path(output_dir))
    ckpt = container.get("ckpt_path")
    if not found or (ckpt and _inside(resolve_ckpt_path(str(ckpt), output_dir), Path(output_dir))):
        return []
    return [
        f"output_dir: '{output_dir}' already holds a run ({', '.join(found)}) that this run would overwrite; "
        f"resume it with ckpt_path=last, choose another directory (hydra.run.dir=...), or set overwrite=true"
    ]


def _inside(path: Path, directory: Path) -> bool:
    return directory.resolve() in path.resolve().parents
