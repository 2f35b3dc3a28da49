"""The real command line, as a user runs it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

from tests.helpers.configs import TINY


def train(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "framework.train", *args], capture_output=True, text=True, timeout=240, cwd=cwd
    )


def test_short_run_writes_every_output(tmp_path):
    run_dir = tmp_path / "run"
    proc = train(*TINY, f"hydra.run.dir={run_dir}", "trainer.enable_progress_bar=true")
    assert proc.returncode == 0, proc.stderr
    assert f"Outputs: {run_dir}" in proc.stdout + proc.stderr
    assert {p.name for p in run_dir.iterdir()} == {
        "config.yaml",
        "train.log",
        "metrics.csv",
        "tb",
        "results.json",
        "checkpoints",
        ".hydra",
    }
    assert {p.name for p in (run_dir / ".hydra").iterdir()} == {"config.yaml", "hydra.yaml", "overrides.yaml"}
    # stderr is a pipe, not a terminal: one plain line per epoch, no carriage-return bar
    assert "\r" not in proc.stderr and "Epoch 1: 6/6 batches" in proc.stderr and "val/acc" in proc.stderr

    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == 12

    with open(run_dir / "metrics.csv") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames[:2] == ["step", "epoch"] and {"train/loss", "val/loss", "val/acc"} <= set(
        reader.fieldnames
    )
    assert [int(r["step"]) for r in rows if r["train/loss"]] == list(range(1, 13))

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tb")).Reload()
    assert {"train/loss", "val/loss", "val/acc", "test/acc"} <= set(events.Tags()["scalars"])
    assert len(events.Scalars("train/loss")) == 12
    hparams = events.PluginTagToContent("hparams")
    assert "_hparams_/experiment" in hparams and "_hparams_/session_start_info" in hparams

    log = (run_dir / "train.log").read_text()
    assert "Instantiating model <framework.models.MLP>" in log and "Finished 'digits_mlp' (completed)" in log
    assert "++datamodule.batch_size=32" in results["job"]["overrides"] and results["job"]["time_s"] > 0

    # the same command again: refused before it starts, the first run's files untouched
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "train.log"}
    again = train(*TINY, f"hydra.run.dir={run_dir}")
    assert again.returncode == 2 and "already holds a run (results.json, checkpoints/)" in again.stderr
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file() and p.name != "train.log"} == before


def test_invalid_config_exits_non_zero_and_writes_only_the_log(tmp_path):
    run_dir = tmp_path / "run"
    proc = train("trainer.max_epoch=3", "optimizer.lrr=1", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2
    assert "Invalid configuration (2 problems)" in proc.stderr
    assert "did you mean 'max_epochs'?" in proc.stderr and "did you mean 'lr'?" in proc.stderr
    assert [p.name for p in run_dir.iterdir()] == ["train.log"]


def test_cfg_job_prints_the_config_without_training(tmp_path):
    proc = train("--cfg", "job", "model=mlp", cwd=tmp_path)
    assert proc.returncode == 0
    assert "_target_: framework.models.MLP" in proc.stdout
    assert not (tmp_path / "outputs").exists()


ENDS_LATE = '''
import atexit, threading, time
from pathlib import Path


class EndsLate:
    """At fit end: a thread that is not a daemon writes a file 0.5 s later, and an atexit
    function records whether that file was already there."""

    def on_fit_end(self, trainer):
        def write():
            time.sleep(0.5)
            Path("thread.txt").write_text("written")

        threading.Thread(target=write).start()
        atexit.register(lambda: Path("atexit.txt").write_text(str(Path("thread.txt").exists())))
'''


def test_a_run_ends_as_python_ends_a_program_waiting_for_its_threads_then_atexit(tmp_path):
    # the command skips the interpreter's teardown (about 0.8 s with torch): what a normal exit
    # guarantees still happens, in its order
    (tmp_path / "ends_late.py").write_text(ENDS_LATE)
    proc = train(
        *TINY,
        "callbacks=none",
        "logger=none",
        "+callbacks.late._target_=ends_late.EndsLate",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "thread.txt").read_text() == "written"
    assert (tmp_path / "atexit.txt").read_text() == "True"
    assert "Finished 'digits_mlp' (completed)" in (tmp_path / "run" / "train.log").read_text()
