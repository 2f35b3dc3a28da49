"""results.json: everything a sweep compares, written by the job itself."""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from framework.config.environment import resolve_accelerator
from framework.config.experiment import Experiment
from framework.engine.attempts import PROMOTED, attempt_dir, holds_the_top, promote

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak bytes of this process: CUDA allocator peak on GPU, peak resident set size on CPU."""
    if device.type == "cuda":
        import torch  # here: a sweep's launcher writes its report from this module without torch

        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def throughput(step_times: list[float], samples: int, windows: int = 5) -> dict:
    """samples/s of the steady-state steps: the first fifth of the steps (at most 20) are the
    warm-up (allocator, caches, the first batches) and left out. ``samples_per_s_windows``: the
    same over ``windows`` consecutive parts of the steady steps, whose spread says how steady
    the speed was; ``samples_per_s_all``: over every step."""
    if not step_times or sum(step_times) <= 0:
        return {
            "samples_per_s": None,
            "samples_per_s_all": None,
            "samples_per_s_windows": [],
            "warmup_steps": 0,
            "step_time_ms_median": statistics.median(step_times) * 1000 if step_times else None,
        }
    per_step = samples / len(step_times)
    warmup = min(20, len(step_times) // 5)
    steady = step_times[warmup:]
    size = max(1, len(steady) // windows)
    parts = [steady[i : i + size] for i in range(0, len(steady) - size + 1, size)]
    return {
        "samples_per_s": per_step * len(steady) / sum(steady),
        "samples_per_s_all": samples / sum(step_times),
        "samples_per_s_windows": [per_step * len(p) / sum(p) for p in parts],
        "warmup_steps": warmup,
        "step_time_ms_median": statistics.median(steady) * 1000,
    }


def job_record(run: Experiment, strategy: str, world_size: int) -> dict:
    """What results.json says of a job whatever its outcome."""
    trainer = run.trainer
    return {
        "status": "running",
        "experiment": run.name,
        "strategy": strategy,
        "accelerator": resolve_accelerator(trainer.accelerator or "auto"),
        "devices": trainer.devices,
        "num_nodes": trainer.num_nodes,
        "world_size": world_size,
        "precision": trainer.precision,
        "output_dir": str(run.output_dir),
    }


def strict(value):
    """``value`` with every NaN or infinity as None: strict JSON, which any parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def write_json(path: Path, data: dict) -> None:
    """Write strict JSON atomically (temporary file + rename): a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as f:
        json.dump(strict(data), f, indent=2, default=str, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def write_results(run_dir: Path, results: dict, attempt: Optional[int] = None) -> Path:
    """``run_dir``/results.json, unless that would replace a finished run's results with a failure
    (a resume that failed): then results.<status>.json beside it. Returns the path written.
    ``attempt``: a later attempt in the run directory (engine/attempts.py) writes its own
    ``attempts/<n>/results.json``, and the top one once it ends other than failed (its record promoted)."""
    if attempt:
        own = attempt_dir(run_dir, attempt) / "results.json"
        write_json(own, results)
        if results.get("status") in PROMOTED:
            promote(run_dir, attempt)
        if not holds_the_top(run_dir, attempt):
            if results.get("status") not in ("completed", "diverged"):  # beside the run's, as it always was
                write_json(run_dir / f"results.{results.get('status')}.json", results)
            return own
    path = run_dir / "results.json"
    if results.get("status") not in ("completed", "diverged") and path.exists():
        try:
            previous = json.loads(path.read_text()).get("status")
        except ValueError:
            previous = None
        if previous in ("completed", "diverged"):
            path = path.with_name(f"results.{results['status']}.json")
            log.error("results.json holds a %s run: this run's results are in %s", previous, path.name)
    write_json(path, results)
    return path


def update_json(path: Path, **fields) -> None:
    """Add ``fields`` to the JSON object in ``path`` (atomically); nothing when it does not exist."""
    if path.exists():
        write_json(path, {**json.loads(path.read_text()), **fields})
