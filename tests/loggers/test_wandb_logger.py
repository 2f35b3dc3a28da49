"""logger=wandb, offline: the run file holds every logged metric, the hparams and the run name."""

from __future__ import annotations

import json
import subprocess

import pytest

from framework import compose, fit
from framework.config.errors import ConfigError
from tests.helpers.configs import TINY, train_losses, wandb_records


def test_offline_wandb_run_records_metrics_hparams_and_name(tmp_path):
    results = fit(compose([*TINY, "logger=[csv,wandb]", "name=wandb_check"]), output_dir=str(tmp_path))
    assert results["status"] == "completed"
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    records = wandb_records(runs[0])
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.display_name == "wandb_check" and run.project == "framework"
    history = [
        {_key(i): json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    logged = [(h["_step"], h["train/loss"]) for h in history if "train/loss" in h]
    assert [loss for _, loss in logged] == pytest.approx(train_losses(tmp_path), rel=1e-6)
    assert [step for step, _ in logged] == list(range(1, len(logged) + 1))
    config = {
        _key(u): json.loads(u.value_json)
        for r in records
        if r.WhichOneof("record_type") == "config"
        for u in r.config.update
    }
    assert config["trainer.max_epochs"] == 2 and config["model._target_"] == "framework.models.MLP"
    summary = {
        _key(u): json.loads(u.value_json)
        for r in records
        if r.WhichOneof("record_type") == "summary"
        for u in r.summary.update
    }
    assert summary["test/acc"] == pytest.approx(results["metrics"]["test/acc"])
    # run.finish() ended W&B's service: nothing of it outlives the run
    assert subprocess.run(["pgrep", "-f", "wandb-core"], capture_output=True).returncode == 1


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)  # W&B stores some keys split at '/'


def test_a_bad_wandb_mode_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="logger.wandb.mode: 'onlin' is not one of online, offline, disabled"):
        fit(compose([*TINY, "logger=wandb", "logger.wandb.mode=onlin"]), output_dir=str(tmp_path))
