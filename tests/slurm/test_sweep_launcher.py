"""hydra/launcher=slurm on a live cluster: each job gets its own layout, a layout no node can
hold is refused before anything is submitted, and a job SLURM will not run is reported."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest

from tests.helpers.configs import TINY


def _sweep(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            "hydra/launcher=slurm",
            *TINY,
            "trainer.accelerator=cpu",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=400,
        cwd=tmp_path,
    )


def test_a_sweep_over_device_counts_runs_as_slurm_jobs_and_reports(slurm, tmp_path):
    proc = _sweep(tmp_path, "strategy=ddp", "trainer.devices=1,2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(tmp_path / "sweep" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["status"], r["world_size"]) for r in rows] == [("completed", "1"), ("completed", "2")]
    # same seed, same global batch: the same loss to float tolerance (one process's CPU threads
    # change its last digits: 2.2060999552 with 1 thread, 2.2061001248 with 2, on one device)
    assert float(rows[0]["val/loss"]) == pytest.approx(float(rows[1]["val/loss"]), rel=1e-6)
    assert "accounting storage is disabled" not in proc.stdout + proc.stderr  # submitit's sacct noise


def test_a_layout_no_node_can_hold_is_refused_before_submitting(slurm, tmp_path):
    proc = _sweep(tmp_path, "strategy=ddp", "trainer.devices=2", "hydra.launcher.cpus_per_task=64", "seed=1,2")
    assert proc.returncode == 2
    assert "needs 128 CPUs per node" in proc.stderr and "hydra.launcher.cpus_per_task" in proc.stderr
    assert slurm.run("squeue", "-h").stdout.strip() == ""  # nothing was submitted


def test_a_job_slurm_will_not_schedule_is_reported_and_cancelled(slurm):
    from hydra_plugins.framework_slurm.slurm_sweep import PendingWatcher

    # 2 tasks x 64 CPUs on a node with fewer: squeue's reason is PartitionConfig, for ever
    job = slurm.run("sbatch", "--parsable", "-n2", "--cpus-per-task=64", "--wrap", "true").stdout.strip()
    watcher = PendingWatcher([job], poll_s=0.5)
    started = time.time()
    watcher.start()
    watcher.join(timeout=30)
    assert watcher.verdict and "squeue reason: PartitionConfig" in watcher.verdict
    assert "hydra.launcher.cpus_per_task" in watcher.verdict and time.time() - started < 10
    slurm.wait(job, timeout=30)  # cancelled


def test_a_sweep_continued_submits_only_its_new_job_numbered_after_the_other(slurm, tmp_path):
    first = _sweep(tmp_path, "seed=1")
    assert first.returncode == 0, first.stderr[-3000:]
    sweep = tmp_path / "sweep"
    kept = (sweep / "0" / "results.json").read_bytes()
    grown = _sweep(tmp_path, "seed=1,2")
    assert grown.returncode == 0, grown.stderr[-3000:]
    assert (sweep / "0" / "results.json").read_bytes() == kept  # not submitted again
    assert json.loads((sweep / "sweep.json").read_text())["study"] == {
        "kept": ["0"],
        "resumed": [],
        "afresh": [],
        "new": ["1"],
    }
    results = json.loads((sweep / "1" / "results.json").read_text())
    assert results["status"] == "completed" and results["job"]["num"] == 1 and "seed=2" in results["job"]["overrides"]
