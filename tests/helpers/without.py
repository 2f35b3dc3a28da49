"""A command run as a newcomer would, without some optional libraries (tests/helpers/hidden_modules)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HIDER = Path(__file__).resolve().parent / "hidden_modules"


def run_without(modules: list[str], args: list[str], cwd: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    """``args`` run in ``cwd`` where ``modules`` are not installed."""
    paths = [str(HIDER), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "FRAMEWORK_HIDDEN_MODULES": ",".join(modules)}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
