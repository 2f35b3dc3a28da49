"""Preemption and cancellation on a live SLURM cluster: the batch script users write, the
signals SLURM sends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from framework import compose, fit
from tests.helpers.configs import BASE

ROOT = Path(__file__).resolve().parents[2]
RUN = [*BASE, "strategy=ddp", "trainer.devices=2", "trainer.max_epochs=8"]
SLOW = ["+callbacks.slow._target_=tests.helpers.probes.Slow", "+callbacks.slow.seconds=0.3"]


def _submit(slurm, tmp_path: Path, overrides: list[str], *sbatch_args: str) -> str:
    """sbatch a 2-task job running framework.train in tmp_path/run; returns the job id."""
    script = tmp_path / "job.sh"
    command = " ".join([sys.executable, "-m", "framework.train", *overrides, f"hydra.run.dir={tmp_path / 'run'}"])
    script.write_text(f"#!/bin/bash\ncd {tmp_path}\nsrun {command}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = slurm.run(
        "sbatch",
        "--parsable",
        "--nodes=1",
        "--ntasks=2",
        f"--output={tmp_path}/slurm-%j.out",
        "--open-mode=append",
        *sbatch_args,
        str(script),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _wait_for_steps(run_dir: Path, steps: int, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        metrics = run_dir / "metrics.csv"
        if metrics.exists() and len(metrics.read_text().splitlines()) > steps:
            return
        time.sleep(0.3)
    raise TimeoutError(f"{run_dir} did not log {steps} steps in {timeout} s")


def test_usr1_checkpoints_requeues_and_the_requeued_job_resumes_to_the_same_weights(slurm, tmp_path):
    straight = fit(compose(RUN), output_dir=str(tmp_path / "straight"))
    job = _submit(slurm, tmp_path, [*RUN, *SLOW, "trainer.requeue=true", "ckpt_path=last"], "--requeue")
    _wait_for_steps(tmp_path / "run", 6)
    assert slurm.run("scancel", "--signal=USR1", job).returncode == 0  # what --signal=USR1@<s> sends
    slurm.start_requeued(job)
    slurm.wait(job)
    log = (tmp_path / "run" / "train.log").read_text()
    stopped = int(re.search(r"Interrupted by SIGUSR1 at step (\d+)", log).group(1))
    again = re.search(r"Resumed from .* at epoch \d+, step (\d+)", log)
    assert again, f"the requeued job did not resume; slurmctld's log of it:\n{slurm.log(job)}\nits output:\n" + "".join(
        p.read_text()[-3000:] for p in tmp_path.glob("slurm-*.out")
    )
    resumed = int(again.group(1))
    assert f"Requeue (scontrol requeue {job}): exit 0" in log and resumed == stopped
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == straight["steps"]
    ref, got = torch.load(tmp_path / "straight" / "model.pt"), torch.load(tmp_path / "run" / "model.pt")
    delta = max((got[k] - v).abs().max().item() for k, v in ref.items())
    print(
        f"preemption: signal at step {stopped}, resumed from step {resumed}, max |delta| of the final "
        f"weights {delta:.3g}"
    )
    assert delta <= 1e-6


def test_scancel_stops_the_ranks_and_records_the_interruption(slurm, tmp_path):
    job = _submit(slurm, tmp_path, [*RUN, *SLOW, "trainer.max_epochs=50"])
    _wait_for_steps(tmp_path / "run", 4)
    assert slurm.run("scancel", job).returncode == 0  # SIGTERM to every task, SIGKILL after KillWait
    slurm.wait(job, timeout=60)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "interrupted" and results["signal"] == "SIGTERM"
    assert (tmp_path / "run" / "checkpoints" / "last" / "manifest.json").exists()
    left = subprocess.run(["pgrep", "-f", f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", "processes of the cancelled job are still running"
