"""One row per job of a sweep, read from its ``results.json``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from framework.report.compare import add_loss_differences, add_speedups, flag, swept_keys

# The sweep's own record (start, end, launcher, objective), written by SweepReport.
SWEEP_FILE = "sweep.json"
# hydra/launcher=packed's record of each job's devices and the jobs that ran beside it.
PACKING_FILE = "packing.json"
# A job whose timing windows differ by more than this factor did not run at a steady speed.
NOISY_SPREAD = 1.5


def sweep_record(sweep_dir: Path) -> dict:
    """The sweep's own record (sweep.json), {} where none was written."""
    path = sweep_dir / SWEEP_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job directories: those a job has started writing to (Hydra opens train.log first)."""
    return sorted(
        (
            p
            for p in sweep_dir.iterdir()
            if p.is_dir()
            and not p.name.startswith(".")
            and any((p / name).exists() for name in ("train.log", "config.yaml", "results.json"))
        ),
        key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else p.name),
    )


# Overrides that say how a job ran, not what it computes (a sweep continued in its directory adds
# them to the jobs it resumes or runs again): {key: the value left out, None for any}.
HOW_IT_RAN = {"overwrite": None, "ckpt_path": "last"}


def job_overrides(job: dict) -> dict[str, str]:
    """A job's command-line overrides as {key: value}, without Hydra's own (hydra.*, hydra/*) and
    those that only say how it ran (``HOW_IT_RAN``)."""
    out = {}
    for item in job.get("overrides") or []:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if key in HOW_IT_RAN and HOW_IT_RAN[key] in (None, value):
            continue
        if sep and not key.startswith(("hydra.", "hydra/")):
            out[key] = value
    return out


def strategy_label(name, overrides: dict):
    """The strategy's name, or the config option that chose it when that says more
    (``strategy=bagua/bytegrad``: bagua with one of its algorithms; ``strategy=pp/fsdp``: pp x fsdp)."""
    chosen = overrides.get("strategy") or ""
    return chosen if name and chosen.startswith(f"{name}/") else name


def degrees_label(degrees) -> str | None:
    """The layout's degrees above 1, outermost first: 'dp_shard 2 x cp 2' (None: not recorded)."""
    if not degrees:
        return None
    return " x ".join(f"{name} {degree}" for name, degree in degrees.items() if degree > 1) or "1"


def collect(sweep_dir: Path) -> list[dict]:
    """One row per job directory of ``sweep_dir``, compared with each other."""
    rows = _read(sweep_dir)
    _compare(rows)
    return rows


def collect_many(sweep_dirs: list[Path]) -> list[dict]:
    """The rows of several sweep directories (a study continued in another sweep), compared together;
    each job named ``<sweep dir>/<job>``."""
    names = [Path(d).name for d in sweep_dirs]
    if len(set(names)) < len(names):  # the same name in other places: their paths from where they part
        common = os.path.commonpath([str(Path(d).resolve()) for d in sweep_dirs])
        names = [os.path.relpath(Path(d).resolve(), common) for d in sweep_dirs]
    rows = []
    for directory, name in zip(sweep_dirs, names):
        for row in _read(Path(directory)):
            rows.append({**row, "job": f"{name}/{row['job']}"})
    _compare(rows)
    return rows


def _read(sweep_dir: Path) -> list[dict]:
    rows = []
    for job in job_dirs(sweep_dir):
        path = job / "results.json"
        if not path.exists():
            rows.append({"job": job.name, "path": job, "status": "missing", "reason": "no results.json (interrupted?)"})
            continue
        rows.append({**_row(job.name, json.loads(path.read_text())), "path": job})
    _flag_packed(rows, sweep_dir)
    return rows


def _compare(rows: list[dict]) -> None:
    swept = swept_keys(rows)
    add_speedups(rows, swept)
    add_loss_differences(rows, swept)


def job_path(row: dict, sweep_dir: Path) -> Path:
    """The row's job directory (``path``, else ``<sweep_dir>/<job>``)."""
    return Path(row["path"]) if row.get("path") else sweep_dir / str(row["job"])


def _flag_packed(rows: list[dict], sweep_dir: Path) -> None:
    """hydra/launcher=packed: a job that ran beside others shared the machine (memory bandwidth,
    caches, the CPU's clock) while its throughput was measured."""
    path = sweep_dir / PACKING_FILE
    jobs = json.loads(path.read_text()).get("jobs", {}) if path.exists() else {}
    for row in rows:
        record = jobs.get(row["job"]) or {}
        row["packed_devices"] = record.get("devices")
        if record.get("beside"):
            flag(
                row,
                f"measured beside job(s) {', '.join(map(str, record['beside']))} (hydra/launcher=packed), on "
                f"devices {record['devices']} of its own",
            )


def _strategy_choice(row: dict, r: dict) -> None:
    """strategy=auto: what it chose, and why."""
    choice = r.get("strategy_choice")
    if choice:
        dropped = [f"{c['strategy']} {c['dropped']}" for c in choice.get("candidates", []) if c.get("dropped")]
        flag(
            row,
            f"auto chose {choice['chosen']} ({choice['by']})" + (f"; dropped: {'; '.join(dropped)}" if dropped else ""),
        )


def _row(name: str, r: dict) -> dict:
    memory, metrics, comm = r.get("memory") or {}, r.get("metrics") or {}, r.get("comm") or {}
    peaks = [b for b in memory.get("peak_bytes_per_rank") or [] if b]
    states = [b for b in memory.get("model_state_bytes_per_rank") or [] if b]
    hydra_job = r.get("job") or {}
    overrides = job_overrides(hydra_job)
    row = {
        "job": name,
        "strategy": strategy_label(r.get("strategy"), overrides),
        "devices": r.get("devices"),
        "world_size": r.get("world_size"),
        "degrees": degrees_label(r.get("degrees")),
        "status": r.get("status"),
        "accelerator": r.get("accelerator"),
        **_throughput(r.get("throughput") or {}),
        "peak_mem_mib": max(peaks) / 2**20 if peaks else None,
        "model_state_bytes": max(states) if states else None,
        "predicted_model_state_bytes": memory.get("predicted_model_state_bytes"),
        "parameters": memory.get("parameters"),
        "comm_bytes_per_step": comm.get("bytes_per_step"),
        "comm_algorithm": comm.get("algorithm"),
        "bubble_predicted": (r.get("pipeline") or {}).get("bubble_predicted"),
        "bubble_measured": (r.get("pipeline") or {}).get("bubble_measured"),
        "wall_time_s": r.get("wall_time_s"),
        "reason": r.get("error") or r.get("reason") or "",
        # not columns: what the comparison groups and the timing section use
        "overrides": overrides,
        "degrees_by_name": r.get("degrees"),
        "job_time_s": hydra_job.get("time_s"),
        "started_at": hydra_job.get("started_at"),
        "fit_time_s": r.get("fit_time_s"),
        "test_time_s": r.get("test_time_s"),
        "predict_time_s": r.get("predict_time_s"),
        "harness_time_s": r.get("harness_time_s"),
    }
    if r.get("failed_rank") is not None:
        row["reason"] = f"rank {r['failed_rank']}: {row['reason']}"
    _strategy_choice(row, r)
    warmup, steps = comm.get("warmup_steps"), r.get("steps")
    if warmup and steps is not None and steps <= warmup:
        flag(
            row,
            f"never left its warm-up ({steps} steps <= strategy.warmup_steps={warmup}): it ran as "
            "synchronous gradient averaging",
        )
    low, high = row.get("samples_per_s_min"), row.get("samples_per_s_max")
    if low and high and high / low > NOISY_SPREAD:
        flag(row, f"noisy timing: {low:.4g}-{high:.4g} samples/s across the steady-state windows")
    row.update({k: v for k, v in metrics.items() if k.startswith(METRIC_PREFIXES)})
    return row


# The metrics a report shows (the harness's on the weights training started from, harness.on_start, before
# the trained weights' scores).
METRIC_PREFIXES = ("val/", "test/", "harness_start/", "harness/")


def metric_columns(rows: list[dict]) -> list[str]:
    """Every val/*, then test/*, then harness_start/* and harness/* (lm-evaluation-harness scores of the
    weights training started from and of the trained ones) metric that some job logged."""
    order = METRIC_PREFIXES
    names = {k for row in rows for k in row if k.startswith(order)}
    return sorted(names, key=lambda k: (next(i for i, p in enumerate(order) if k.startswith(p)), k))


def _throughput(throughput: dict) -> dict:
    """samples/s of the steady-state steps and its spread: over the job's repeated trainings
    (benchmark_repeats), else over the timing windows of its one run."""
    spread = [w for w in throughput.get("samples_per_s_repeats") or throughput.get("samples_per_s_windows") or [] if w]
    return {
        "samples_per_s": throughput.get("samples_per_s"),
        "tokens_per_s": throughput.get("tokens_per_s"),
        "samples_per_s_min": min(spread) if spread else None,
        "samples_per_s_max": max(spread) if spread else None,
    }
