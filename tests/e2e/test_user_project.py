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
    proc = subprocess.run(
        [sys.executable, "-m", "framework.train", *flags, f"hydra.searchpath=[file://{project / 'configs'}]", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
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
    _train(
        project, "experiment=sine_regression", "optimizer.lr=0.01,0.001", *SHORT, "hydra.sweep.dir=sweep", flags=("-m",)
    )
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


def _losses(run_dir: Path) -> list[float]:
    with open(run_dir / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_own_strategy_by_target_trains_on_two_ranks_with_its_options_checked(project):
    # the project's local-SGD strategy (2 files: its module and configs/strategy/local_sgd.yaml):
    # averaging plain-SGD weights after every step is data parallelism, so it matches one device
    args = [
        "experiment=sine_regression",
        "optimizer=sgd",
        "optimizer.lr=0.05",
        "logger=csv",
        "trainer.log_every_n_steps=1",
        *SHORT,
    ]
    _train(project, *args, "hydra.run.dir=single")
    _train(
        project,
        *args,
        "strategy=local_sgd",
        "strategy.sync_every_n_steps=1",
        "trainer.devices=2",
        "hydra.run.dir=local",
    )
    local = json.loads((project / "local" / "results.json").read_text())
    assert local["status"] == "completed" and local["strategy"] == "local_sgd" and local["world_size"] == 2
    assert _losses(project / "local") == pytest.approx(_losses(project / "single"), rel=1e-5)
    assert len(_losses(project / "local")) > 10
    # its own options are validated before any process starts, like a built-in strategy's
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.train",
            f"hydra.searchpath=[file://{project / 'configs'}]",
            *args,
            "strategy=local_sgd",
            "strategy.sync_every_n_steps=0",
            "+strategy.sync_every=3",
            "trainer.devices=2",
            "hydra.run.dir=refused",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2
    assert "strategy.sync_every_n_steps: must be >= 1, got 0" in refused.stderr
    assert "strategy.sync_every: unknown key; did you mean 'sync_every_n_steps'?" in refused.stderr
    assert not (project / "refused" / "results.json").exists()


def test_own_subclass_of_the_frameworks_ddp_runs_adapters_on_two_ranks(project):
    """A class of the user's, a subclass of DDPStrategy selected by _target_, inherits what DDP can run
    (adapters: its class attribute, no list of names), and trains the LoRA experiment as ddp does."""
    args = ["experiment=hf_lora_instructions", "trainer.max_steps=3", "logger=csv", "trainer.log_every_n_steps=1"]
    args += ["trainer.devices=2", "test=false", "predict=false", *SHORT]
    _train(project, *args, "strategy=ddp", "hydra.run.dir=ddp")
    _train(project, *args, "strategy=traced_ddp", "hydra.run.dir=traced")
    traced = json.loads((project / "traced" / "results.json").read_text())
    assert traced["status"] == "completed" and traced["strategy"] == "traced_ddp" and traced["world_size"] == 2
    assert traced["comm"]["last_grad_norm"] > 0
    assert _losses(project / "traced") == pytest.approx(_losses(project / "ddp"), rel=1e-6)
