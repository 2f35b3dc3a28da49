"""The devices a packed sweep shares out, and how a job is held to its own: CUDA devices
(``CUDA_VISIBLE_DEVICES``), or CPU cores (the job's affinity; its ranks split those cores'
threads, framework/rank/run.py ``cpu_threads``). Found without importing torch or touching CUDA
in the launcher, whose jobs fork from it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from framework.config.environment import cpu_cores


def cuda_devices() -> list[int]:
    """The CUDA devices this process may use: CUDA_VISIBLE_DEVICES's, else nvidia-smi's list."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [int(d) for d in visible.split(",") if d.strip().isdigit()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return list(range(sum(line.startswith("GPU ") for line in out.splitlines())))


def pool(kind: str, devices) -> tuple[str, list[int]]:
    """(cuda | cpu, the device ids) for the launcher's ``kind`` (auto: CUDA when there is a GPU)
    and ``devices`` (null: all of that kind; N: the first N; a list: those)."""
    if kind not in ("auto", "cuda", "cpu"):
        raise ValueError(f"hydra.launcher.kind: expected auto, cuda or cpu, got {kind!r}")
    gpus = cuda_devices() if kind in ("auto", "cuda") else []
    if kind == "cuda" and not gpus:
        raise ValueError("hydra.launcher.kind=cuda, but no CUDA device is visible (nvidia-smi -L lists none)")
    kind, found = ("cuda", gpus) if gpus else ("cpu", cpu_cores())
    if devices is None:
        return kind, found
    if isinstance(devices, int) and not isinstance(devices, bool) and 0 < devices <= len(found):
        return kind, found[:devices]
    if (
        isinstance(devices, (list, tuple))
        and devices
        and all(d in found for d in devices)
        and len(set(devices)) == len(devices)
    ):
        return kind, sorted(devices)
    raise ValueError(
        f"hydra.launcher.devices: expected null, a count from 1 to {len(found)} or a list of "
        f"{kind} device ids among {found}, each once, got {devices!r}"
    )


def max_skips_problem(value) -> str | None:
    """``hydra.launcher.max_skips``: null or a count >= 0."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return None
    return f"hydra.launcher.max_skips: expected null (the device count) or a count >= 0, got {value!r}"


def hold_to(kind: str, devices: list[int]) -> None:
    """In the job's own process, before anything starts: only these devices."""
    if kind == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
    else:
        os.sched_setaffinity(0, devices)
