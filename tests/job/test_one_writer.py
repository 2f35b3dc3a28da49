"""One writer per run or sweep directory, and checkpoint names that stay inside their directory:
two runs (or sweeps) started into one directory, one is refused at once naming the other's process
and the other's files stay whole; a name that would escape is refused and nothing outside is touched."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from framework.engine.run_directory import DirectoryLock
from tests.helpers.configs import TINY

SLOW = ["+callbacks.slow._target_=tests.helpers.probes.Slow", "+callbacks.slow.seconds=0.3", "logger=csv"]


def _train(*args: str, wait: bool = True, flags: tuple = ()):
    command = [sys.executable, "-m", "framework.train", *flags, *TINY, *args]
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _held(path: Path, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and not DirectoryLock(path).holder():
        time.sleep(0.1)
    assert DirectoryLock(path).holder(), f"nothing took {path}"


def test_a_second_run_into_a_busy_run_directory_is_refused_with_the_first_ones_pid(tmp_path):
    run = tmp_path / "run"
    first = _train(*SLOW, f"hydra.run.dir={run}", wait=False)
    _held(run)
    second = _train("trainer.max_epochs=1", f"hydra.run.dir={run}")
    assert second.returncode == 2
    assert f"output_dir: '{run}' is being written by another run (pid {first.pid})" in second.stderr
    assert first.wait(timeout=300) == 0
    results = json.loads((run / "results.json").read_text())
    assert results["status"] == "completed" and results["steps"] == 12  # the first run's, whole
    assert "+callbacks.slow.seconds=0.3" in results["job"]["overrides"]
    last = json.loads((run / "checkpoints" / "last" / "manifest.json").read_text())
    assert last["step"] == 12 and last["strategy"] == "single"  # the first run's, committed
    assert not DirectoryLock(run).holder()  # released when the run ended


def test_a_second_sweep_into_a_busy_sweep_directory_is_refused(tmp_path):
    sweep = tmp_path / "sweep"
    first = _train(*SLOW, "optimizer.lr=0.01,0.001", f"hydra.sweep.dir={sweep}", wait=False, flags=("-m",))
    _held(sweep)
    second = _train("optimizer.lr=0.1,0.2", "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}", flags=("-m",))
    assert second.returncode == 2
    assert f"hydra.sweep.dir: '{sweep}' is being written by another run (pid {first.pid})" in second.stderr
    assert first.wait(timeout=300) == 0
    jobs = [json.loads((sweep / str(n) / "results.json").read_text()) for n in (0, 1)]
    assert [j["status"] for j in jobs] == ["completed", "completed"]
    assert sorted(o.lstrip("+") for j in jobs for o in j["job"]["overrides"] if "optimizer.lr" in o) == [
        "optimizer.lr=0.001",
        "optimizer.lr=0.01",
    ]  # the first sweep's jobs only
    assert (sweep / "report.md").exists()


def test_a_sweep_whose_job_directory_is_busy_refuses_that_job_and_exits_non_zero(tmp_path):
    sweep = tmp_path / "sweep"
    with DirectoryLock(sweep / "1"):  # another process writes job 1's directory
        done = _train("optimizer.lr=0.01,0.001", "trainer.max_epochs=1", f"hydra.sweep.dir={sweep}", flags=("-m",))
    assert done.returncode == 1 and "1 job(s) failed: 1" in done.stderr
    assert json.loads((sweep / "0" / "results.json").read_text())["status"] == "completed"
    assert not (sweep / "1" / "results.json").exists()  # nothing of this sweep went into the busy directory
    assert json.loads((sweep / "sweep.json").read_text())["refused_jobs"] == ["1"]


def test_a_checkpoint_name_that_would_leave_its_directory_is_refused_and_nothing_outside_is_touched(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    run = tmp_path / "a" / "b" / "run"
    for name in ("../../../victim", "../../../escaped{epoch}"):
        done = _train(f"callbacks.model_checkpoint.filename='{name}'", f"hydra.run.dir={run}")
        assert done.returncode == 2 and "callbacks.model_checkpoint.filename:" in done.stderr
        assert "is not a plain file name" in done.stderr
    assert (victim / "precious.txt").read_text() == "keep me" and sorted(p.name for p in victim.iterdir()) == [
        "precious.txt"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "victim"] and not (run / "checkpoints").exists()
