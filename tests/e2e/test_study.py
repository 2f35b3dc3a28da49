"""A study: a sweep of 2 learning rates x 3 seeds killed by SIGTERM while its third job trains, the
same command again (the finished jobs kept byte for byte, the interrupted one resumed from its
checkpoint to the losses of an uninterrupted run, the rest run), its seeds aggregated in summary.csv,
then the grid grown by a learning rate (only the new jobs run)."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys

import pytest

from framework import compose, fit
from tests.helpers.configs import TINY, train_losses

pytestmark = pytest.mark.multiprocess

JOB = [*TINY, "trainer.accelerator=cpu", "callbacks=none", "logger=csv"]


def study(out, lrs: str, stop_marker) -> subprocess.CompletedProcess:
    """The study's command: optimizer.lr=<lrs> seed=0,1,2; the first time it runs, SIGTERM after step 3
    of its third job (the probe fires once: ``stop_marker`` records that it did)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            "-m",
            *JOB,
            f"optimizer.lr={lrs}",
            "seed=0,1,2",
            "+callbacks.stop._target_=tests.helpers.probes.SignalInJob",
            "+callbacks.stop.step=3",
            "+callbacks.stop.job=3",
            f"+callbacks.stop.once={stop_marker}",
            f"hydra.sweep.dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def results(out, job: str) -> dict:
    return json.loads((out / job / "results.json").read_text())


def test_a_study_stopped_midway_continues_where_it_stopped_and_aggregates_its_seeds(tmp_path):
    out, marker = tmp_path / "study", tmp_path / "stopped"
    stopped = study(out, "0.001,0.01", marker)
    assert stopped.returncode == 128 + 15, stopped.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["0", "1", "2"]
    assert [results(out, j)["status"] for j in "012"] == ["completed", "completed", "interrupted"]
    assert (out / "2" / "checkpoints" / "last").is_dir()
    report = (out / "report.md").read_text()
    assert "Stopped by signal 15" in report and f"hydra.sweep.dir={out.resolve()}" in report  # how to continue
    finished = {j: (out / j / "results.json").read_bytes() for j in "01"}

    again = study(out, "0.001,0.01", marker)  # the same command
    assert again.returncode == 0, again.stderr[-3000:]
    assert [results(out, j)["status"] for j in "012345"] == ["completed"] * 6
    assert {j: (out / j / "results.json").read_bytes() for j in "01"} == finished  # not run again
    assert "Resumed from" in (out / "2" / "train.log").read_text()
    straight = tmp_path / "straight"  # job 2's overrides (lr 0.001, seed 2), never interrupted
    fit(compose([*JOB, "optimizer.lr=0.001", "seed=2"]), output_dir=str(straight))
    assert train_losses(out / "2") == train_losses(straight)
    report = (out / "report.md").read_text()
    assert "kept 0, 1 (finished with the same config: not run again); resumed 2 from checkpoints/last; ran 3, 4, 5" in (
        report
    )

    with open(out / "summary.csv") as f:
        summary = {row["optimizer.lr"]: row for row in csv.DictReader(f)}
    assert sorted(summary) == ["0.001", "0.01"] and {row["n"] for row in summary.values()} == {"3"}
    for lr, jobs in {"0.001": "012", "0.01": "345"}.items():
        accuracies = [results(out, j)["metrics"]["val/acc"] for j in jobs]
        assert float(summary[lr]["val/acc_mean"]) == pytest.approx(statistics.mean(accuracies), rel=1e-12)
        assert float(summary[lr]["val/acc_std"]) == pytest.approx(statistics.stdev(accuracies), rel=1e-12)
        assert (
            float(summary[lr]["val/acc_ci95_low"])
            <= statistics.mean(accuracies)
            <= float(summary[lr]["val/acc_ci95_high"])
        )
    assert "Best setting by val/loss (min)" in report and "Welch's t test" in report

    kept = {j: (out / j / "results.json").read_bytes() for j in "012345"}
    grown = study(out, "0.001,0.01,0.1", marker)
    assert grown.returncode == 0, grown.stderr[-3000:]
    assert {j: (out / j / "results.json").read_bytes() for j in "012345"} == kept
    assert json.loads((out / "sweep.json").read_text())["study"]["new"] == ["6", "7", "8"]
    assert all("++optimizer.lr=0.1" in results(out, j)["job"]["overrides"] for j in "678")
    with open(out / "summary.csv") as f:
        assert [(row["optimizer.lr"], row["n"]) for row in csv.DictReader(f)] == [
            ("0.001", "3"),
            ("0.01", "3"),
            ("0.1", "3"),
        ]
