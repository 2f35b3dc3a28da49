"""hydra/launcher=packed: jobs side by side, each on CPU cores of its own, with the basic
launcher's job numbers, directories, results and report; a stop signal interrupts the running
jobs with checkpoints/last, writes the report and leaves no process behind."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
import time

import pytest

from scripts.failure_drill import alive
from tests.helpers.configs import TINY

pytestmark = pytest.mark.multiprocess

JOB = [
    *TINY,
    "trainer.accelerator=cpu",
    "trainer.num_threads=1",
    "callbacks=none",
    "logger=csv",
    "strategy.timeout_s=60",
]
# The report's columns that hold no timing (what must not depend on the launcher).
SAME = (
    "job",
    "strategy",
    "devices",
    "world_size",
    "status",
    "loss_rel_diff",
    "model_state_bytes",
    "val/loss",
    "test/loss",
    "rank",
)


def sweep(out, *overrides, packed: bool = True, timeout: int = 400) -> subprocess.CompletedProcess:
    args = [
        sys.executable,
        "-m",
        "framework.train",
        "-m",
        *(["hydra/launcher=packed"] if packed else []),
        *JOB,
        *overrides,
        f"hydra.sweep.dir={out}",
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def report_rows(out) -> list[dict]:
    with open(out / "report.csv") as f:
        return [{k: r[k] for k in SAME} for r in csv.DictReader(f)]


def overlaps(a: dict, b: dict) -> bool:
    return a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]


def test_a_devices_grid_runs_each_job_on_cores_of_its_own_with_the_basic_launchers_report(tmp_path):
    grid = ["strategy=ddp,fsdp", "trainer.devices=1,2"]
    proc = sweep(tmp_path / "packed", *grid)
    assert proc.returncode == 0, proc.stderr[-3000:]
    packing = json.loads((tmp_path / "packed" / "packing.json").read_text())
    jobs = packing["jobs"]
    assert packing["kind"] == "cpu" and sorted(jobs) == ["0", "1", "2", "3"]
    for num, record in jobs.items():
        results = json.loads((tmp_path / "packed" / num / "results.json").read_text())
        assert results["status"] == "completed"
        assert len(record["devices"]) == results["devices"]  # as many cores as devices
        assert results["placement"]["cpus"] == record["devices"]  # where the job really ran
        for other_num, other in jobs.items():  # no core runs two jobs at once
            if other_num != num and overlaps(record, other):
                assert not set(record["devices"]) & set(other["devices"]), (num, other_num)
    assert any(record["beside"] for record in jobs.values())  # the 1-device jobs ran side by side
    basic = sweep(tmp_path / "basic", *grid, packed=False)
    assert basic.returncode == 0, basic.stderr[-3000:]
    assert report_rows(tmp_path / "packed") == report_rows(tmp_path / "basic")
    assert "hydra/launcher=packed" in (tmp_path / "packed" / "report.md").read_text()  # the flag on those jobs


def test_optuna_trials_run_side_by_side(tmp_path):
    proc = sweep(tmp_path, "hparams_search=digits_optuna", "hydra.sweeper.n_trials=4", "hydra.sweeper.n_jobs=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = json.loads((tmp_path / "packing.json").read_text())["jobs"]
    assert sorted(jobs) == ["0", "1", "2", "3"] and jobs["0"]["beside"] == [1] and jobs["2"]["beside"] == [3]
    assert "best_params" in (tmp_path / "optimization_results.yaml").read_text()


def start_stoppable_sweep(out, seeds: str, epochs: int, console=subprocess.DEVNULL) -> subprocess.Popen:
    """A packed sweep of long jobs that save checkpoints/last, returned once jobs 0 and 1 train."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            "hydra/launcher=packed",
            *JOB,
            f"seed={seeds}",
            f"trainer.max_epochs={epochs}",
            "trainer.limit_train_batches=1.0",
            "callbacks=model_checkpoint",
            "callbacks.model_checkpoint.monitor=null",
            f"hydra.sweep.dir={out}",
        ],
        stdout=console,
        stderr=subprocess.STDOUT,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not all((out / j / "metrics.csv").exists() for j in ("0", "1")):
        time.sleep(0.2)
    assert all((out / j / "metrics.csv").exists() for j in ("0", "1")), "the two jobs did not start training"
    return proc


def test_sigterm_interrupts_the_running_jobs_writes_the_report_and_leaves_nothing(tmp_path):
    out = tmp_path / "sweep"
    proc = start_stoppable_sweep(out, "1,2,3", 300)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    jobs = json.loads((out / "packing.json").read_text())["jobs"]
    assert sorted(jobs) == ["0", "1"]  # the third never started
    for j in ("0", "1"):
        assert json.loads((out / j / "results.json").read_text())["status"] == "interrupted"
        assert (out / j / "checkpoints" / "last").is_dir()
    report = (out / "report.md").read_text()
    assert "2 interrupted" in report and "Stopped by signal 15 before its end: job(s) 2 never started." in report
    assert not alive({record["pid"] for record in jobs.values()})


def test_a_launcher_killed_outright_takes_its_running_jobs_with_it(tmp_path):
    # The jobs fork from the job server, which outlives a killed launcher while they run: each job
    # watches the launcher itself, stops as on SIGTERM (checkpoints/last) and leaves nothing.
    out, log = tmp_path / "sweep", tmp_path / "launcher.log"
    with open(log, "w") as console:
        proc = start_stoppable_sweep(out, "1,2", 2000, console)
        proc.kill()
        proc.wait(timeout=30)
    pids = {int(pid) for pid in re.findall(r"job #\d started on cpu \[\d\] \(pid (\d+)\)", log.read_text())}
    assert len(pids) == 2, log.read_text()[-3000:]
    deadline = time.time() + 60
    while time.time() < deadline and alive(pids):
        time.sleep(0.5)
    assert not alive(pids)
    for j in ("0", "1"):
        assert json.loads((out / j / "results.json").read_text())["status"] == "interrupted"
        assert (out / j / "checkpoints" / "last").is_dir()
