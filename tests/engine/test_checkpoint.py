"""Checkpoints, exact resume, early stopping."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch

from framework import compose, fit
from framework.engine.checkpoint import is_checkpoint

RUN = [
    "experiment=digits_mlp",
    "model.hidden_sizes=[32]",
    "model.dropout=0.2",
    "datamodule.batch_size=32",
    "trainer.max_epochs=3",
    "trainer.limit_train_batches=6",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "logger=csv",
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.filename='step{step}'",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.save_top_k=-1",
    "callbacks.model_checkpoint.every_n_train_steps=5",
    "callbacks.model_checkpoint.every_n_epochs=1",
]


def rows(output_dir) -> dict[int, dict]:
    with open(output_dir / "metrics.csv") as f:
        return {int(r["step"]): r for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    out = tmp_path_factory.mktemp("straight")
    return out, fit(compose(RUN), output_dir=str(out))


@pytest.mark.parametrize("step,where", [(5, "mid-epoch"), (12, "epoch boundary")])
def test_resume_gives_the_same_losses_bit_for_bit(straight, tmp_path, step, where):
    out, results = straight
    ckpt = out / "checkpoints" / f"step{step}"
    assert is_checkpoint(ckpt)
    resumed = fit(compose(RUN + [f"ckpt_path={ckpt}"]), output_dir=str(tmp_path))
    assert resumed["steps"] == results["steps"] == 18
    expected, got = rows(out), rows(tmp_path)
    later = [s for s in expected if s > step and expected[s]["train/loss"]]
    assert later and all(got[s]["train/loss"] == expected[s]["train/loss"] for s in later), where
    for key in ("val/loss", "val/acc", "test/acc"):
        assert resumed["metrics"][key] == results["metrics"][key]


def test_last_shares_the_files_of_a_checkpoint_saved_at_the_same_step(straight):
    # Step 18 ends the run and is saved by name: `last` is hard links to it, not a second
    # write, and carries the callback state that already counts step18 among the kept.
    ckpts = straight[0] / "checkpoints"
    for name in ("trainer.pt", "rng/0.pt"):
        assert os.stat(ckpts / "last" / name).st_ino == os.stat(ckpts / "step18" / name).st_ino
    state = torch.load(ckpts / "last" / "trainer.pt", weights_only=False)
    assert state["loop"]["global_step"] == 18
    assert any("step18" in cb.get("best_k", {}) for cb in state["callbacks"].values())


def test_top_k_best_and_last(tmp_path):
    results = fit(
        compose(
            RUN[:-5]
            + [
                "callbacks.model_checkpoint.filename='epoch{epoch}-acc{val_acc:.4f}'",
                "callbacks.model_checkpoint.monitor=val/acc",
                "callbacks.model_checkpoint.mode=max",
                "callbacks.model_checkpoint.save_top_k=2",
                "trainer.max_epochs=4",
            ]
        ),
        output_dir=str(tmp_path),
    )
    ckpts = tmp_path / "checkpoints"
    names = sorted(p.name for p in ckpts.iterdir() if not p.name.startswith("."))
    assert "last" in names and "best" in names and len(names) == 4, names
    kept = [n for n in names if n.startswith("epoch")]
    accs = sorted(float(n.split("acc")[1]) for n in kept)
    best = os.readlink(ckpts / "best")
    assert float(best.split("acc")[1]) == max(accs) and is_checkpoint(ckpts / "best")
    assert torch.load(ckpts / "last" / "trainer.pt", weights_only=False)["loop"]["global_step"] == results["steps"]


def test_interrupted_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    from framework.engine import checkpoint as ck

    fit(
        compose(RUN[:-5] + ["trainer.max_epochs=1", "callbacks.model_checkpoint.monitor=null"]),
        output_dir=str(tmp_path),
    )
    last = tmp_path / "checkpoints" / "last"
    before = torch.load(last / "trainer.pt", weights_only=False)["loop"]["global_step"]

    class Trainerish:  # enough of a trainer for save_checkpoint
        from framework.config.schemas import StrategyConfig
        from framework.strategies.base import Strategy

        strategy = Strategy(StrategyConfig(), "cpu")
        model = torch.nn.Linear(2, 2)
        optimizer = None

        def state_dict(self):
            return {}

        def sharded_callback_state(self):
            return {}

    real_save = torch.save

    def dying_save(obj, path, *a, **k):  # the process "dies" while writing trainer.pt
        if str(path).endswith("trainer.pt"):
            raise KeyboardInterrupt("killed mid-save")
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(ck.torch, "save", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(last, Trainerish())
    monkeypatch.undo()
    assert is_checkpoint(last)
    assert torch.load(last / "trainer.pt", weights_only=False)["loop"]["global_step"] == before
    resumed = fit(compose(RUN[:-5] + ["trainer.max_epochs=2", f"ckpt_path={last}"]), output_dir=str(tmp_path / "r"))
    assert resumed["status"] == "completed" and resumed["steps"] == 12


def test_early_stopping_on_a_plateau(tmp_path):
    results = fit(
        compose(
            RUN[:-9]
            + [
                "callbacks=early_stopping",
                "callbacks.early_stopping.patience=1",
                "callbacks.early_stopping.min_delta=10",
                "trainer.max_epochs=10",
            ]
        ),
        output_dir=str(tmp_path),
    )
    assert results["epochs"] == 2 and results["steps"] == 12
    assert "Early stopping at step 12: val/loss did not improve" in (tmp_path / "train.log").read_text()


def test_early_stopping_on_nan(tmp_path):
    results = fit(
        compose(RUN[:-9] + ["callbacks=early_stopping", "optimizer=sgd", "optimizer.lr=1e30", "trainer.max_epochs=10"]),
        output_dir=str(tmp_path),
    )
    assert results["epochs"] == 1
    assert "is not finite" in (tmp_path / "train.log").read_text()


def test_ckpt_path_that_is_not_a_checkpoint_is_a_config_error(tmp_path):
    from framework.config import ConfigError
    from framework.job.preflight import preflight

    with pytest.raises(ConfigError) as err:
        preflight(compose(RUN + [f"ckpt_path={tmp_path}"]))
    assert "ckpt_path: no checkpoint at" in str(err.value)


def _evaluate(*args: str, cwd=None, env=None):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "framework.evaluate", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env=env,
    )


def test_evaluate_a_saved_checkpoint_with_another_strategy(straight, tmp_path):
    out, results = straight
    (tmp_path / "tmp").mkdir()
    # groups override the saved config as in train: its strategy is replaced whole
    proc = _evaluate(
        f"ckpt_path={out / 'checkpoints' / 'last'}",
        f"output_dir={tmp_path / 'eval'}",
        "trainer.limit_test_batches=1.0",
        "strategy=ddp",
        "trainer.devices=2",
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
    )
    assert proc.returncode == 0, proc.stderr
    assert not list((tmp_path / "tmp").glob("framework-evaluate-*"))  # its primary config, removed at the end
    assert not list((tmp_path / "tmp").glob("torchelastic_*"))  # nor the elastic agent's directory for a launch
    evaluated = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert evaluated["status"] == "completed" and evaluated["steps"] == 0 and evaluated["world_size"] == 2
    # the final weights, tested again: the same test metrics as the run itself
    assert evaluated["metrics"]["test/acc"] == results["metrics"]["test/acc"]
    assert evaluated["metrics"]["test/loss"] == pytest.approx(results["metrics"]["test/loss"], rel=1e-6)
    assert (tmp_path / "eval" / "metrics.csv").exists() and not (out / "eval").exists()
    assert (tmp_path / "eval" / ".hydra" / "overrides.yaml").exists()


def test_evaluate_is_a_hydra_app_over_the_saved_config(straight):
    import yaml

    out, _ = straight
    proc = _evaluate(
        f"ckpt_path={out / 'checkpoints' / 'last'}", "strategy=fsdp", "datamodule.batch_size=16", "--cfg", "job"
    )
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    saved = yaml.safe_load((out / "config.yaml").read_text())
    # the chosen strategy, with its options and their defaults (issue 26: `--cfg job` shows them)
    assert cfg["strategy"]["name"] == "fsdp" and cfg["strategy"]["sharding"] == "full"
    assert cfg["datamodule"]["batch_size"] == 16
    assert cfg["model"] == saved["model"] and cfg["train"] is False and cfg["test"] is True
    helped = _evaluate("--help")
    assert helped.returncode == 0 and "ckpt_path=" in helped.stderr and "strategy: " in helped.stdout
    missing = _evaluate("strategy=ddp")
    assert missing.returncode == 2 and "ckpt_path: missing" in missing.stderr


def test_resume_from_the_last_written_when_fit_stopped_mid_epoch(tmp_path):
    # max_steps=9 stops in epoch 2 (4 batches an epoch); `last` is written at fit end. Resumed
    # to step 12 it continues epoch 2 at its second batch, as the straight run does.
    short = RUN[:-5] + [
        "callbacks.model_checkpoint.monitor=null",
        "trainer.max_epochs=5",
        "trainer.limit_train_batches=4",
        "scheduler=none",
    ]
    straight = fit(compose(short + ["trainer.max_steps=12"]), output_dir=str(tmp_path / "straight"))
    fit(compose(short + ["trainer.max_steps=9"]), output_dir=str(tmp_path / "first"))
    state = torch.load(tmp_path / "first" / "checkpoints" / "last" / "trainer.pt", weights_only=False)["loop"]
    assert (state["global_step"], state["current_epoch"], state["batch_in_epoch"]) == (9, 2, 1)
    resumed = fit(
        compose(short + ["trainer.max_steps=12", f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last'}"]),
        output_dir=str(tmp_path / "resumed"),
    )
    assert resumed["steps"] == straight["steps"] == 12 and resumed["epochs"] == straight["epochs"] == 3
    expected, got = rows(tmp_path / "straight"), rows(tmp_path / "resumed")
    assert [got[s]["train/loss"] for s in (10, 11, 12)] == [expected[s]["train/loss"] for s in (10, 11, 12)]


def test_a_resume_past_max_steps_says_that_nothing_trains(tmp_path):
    short = RUN[:-5] + ["callbacks.model_checkpoint.monitor=null", "trainer.limit_train_batches=4", "scheduler=none"]
    fit(compose(short + ["trainer.max_steps=6"]), output_dir=str(tmp_path))
    resumed = fit(compose(short + ["trainer.max_steps=3", "ckpt_path=last"]), output_dir=str(tmp_path))
    assert resumed["status"] == "completed" and resumed["steps"] == 6
    log = (tmp_path / "train.log").read_text()
    assert "has reached trainer.max_steps=3 (step 6) already: nothing trains" in log


def test_resuming_in_the_same_directory_keeps_metrics_csv_one_table(tmp_path):
    fit(
        compose(RUN[:-5] + ["trainer.max_epochs=1", "callbacks.model_checkpoint.monitor=null"]),
        output_dir=str(tmp_path),
    )
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0]
    fit(
        compose(RUN[:-5] + ["trainer.max_epochs=2", "callbacks.model_checkpoint.monitor=null", "ckpt_path=last"]),
        output_dir=str(tmp_path),
    )
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0] == header and lines[0].split(",").count("step") == 1
    steps = [int(r["step"]) for r in rows(tmp_path).values()]
    epochs = {r["epoch"] for r in rows(tmp_path).values()}
    assert steps == sorted(steps) and max(steps) == 12 and epochs <= {"0", "1", "2"}  # integer epochs
