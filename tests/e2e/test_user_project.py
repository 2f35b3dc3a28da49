"""A user's own project (examples/user_project) outside the repository: its model, DataModule
and task, its config groups merged with the framework's through hydra.searchpath."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "user_project"
SHORT = ["trainer.max_epochs=2", "trainer.enable_progress_bar=false"]


@pytest.fixture
def project(tmp_path):
    shutil.copytree(EXAMPLE, tmp_path / "project")
    return tmp_path / "project"


def _train(project: Path, *args: str, flags: tuple = ()) -> subprocess.CompletedProcess:
    # the project's modules import from its directory, as `python -m` makes it
    proc = subprocess.run([sys.executable, "-m", "framework.train", *flags,
                           f"hydra.searchpath=[file://{project / 'configs'}]", *args],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_own_model_data_and_task_train_on_two_ranks_and_in_a_sweep(project):
    # 2-rank ddp of the project's experiment, the framework's strategy and callbacks
    _train(project, "experiment=sine_regression", "strategy=ddp", "trainer.devices=2", *SHORT, "hydra.run.dir=ddp")
    ddp = json.loads((project / "ddp" / "results.json").read_text())
    assert ddp["status"] == "completed" and ddp["world_size"] == 2 and ddp["experiment"] == "sine_regression"
    assert {"val/mae", "test/mae"} <= set(ddp["metrics"])
    assert any("val_mae" in p.name for p in (project / "ddp" / "checkpoints").iterdir())  # monitored by it

    # a sweep: its report has the task's own metric, and ranks the jobs by it (optimized_metric)
    _train(project, "experiment=sine_regression", "optimizer.lr=0.01,0.001", *SHORT, "hydra.sweep.dir=sweep", flags=("-m",))
    with open(project / "sweep" / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert "val/mae" in rows[0] and "val/acc" not in rows[0]
    assert sorted(r["rank"] for r in rows) == ["1", "2"]
    report = (project / "sweep" / "report.md").read_text()
    assert "Best by val/mae (min)" in report
    # the same global batch and seed: the 2-rank job's metrics are the 1-device job's
    single = json.loads((project / "sweep" / "0" / "results.json").read_text())
    assert ddp["metrics"]["val/mae"] == pytest.approx(single["metrics"]["val/mae"], rel=1e-5)


def test_own_group_option_next_to_the_frameworks(project):
    proc = _train(project, "model=my_net", "datamodule=sine", "task=regression", "--cfg", "job")
    assert "_target_: my_project.model.TinyRegressor" in proc.stdout
    assert "_target_: torch.optim.Adam" in proc.stdout  # the framework's optimizer group
