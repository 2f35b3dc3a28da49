"""The code's style is ruff's, as pyproject.toml configures it: lint and format."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.multiprocess
@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_the_code_is_clean_under_ruff(command):
    proc = subprocess.run([sys.executable, "-m", "ruff", *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, (
        f"ruff {' '.join(command)}: run `ruff {command[0]} .` to see or fix\n{proc.stdout[-3000:]}"
    )
