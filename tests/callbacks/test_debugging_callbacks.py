"""Debugging aids and the remaining callbacks: overfit_batches, sanity check, profilers, LR monitor,
backbone fine-tuning, throughput."""

from __future__ import annotations

import csv

import pytest

from framework import build_trainer, compose, fit
from tests.helpers.probes import CompileProbe

QUIET = ["trainer.enable_progress_bar=false"]


def test_overfit_batches_reaches_near_zero_loss_on_the_same_batches(tiny_cfg, tmp_path):
    results = fit(
        tiny_cfg(
            "trainer.overfit_batches=2",
            "trainer.max_epochs=60",
            "scheduler=none",
            "optimizer.lr=0.01",
            "callbacks=none",
            "trainer.log_every_n_steps=10",
        ),
        output_dir=str(tmp_path),
    )
    assert results["steps"] == 120 and results["metrics"]["train/loss"] < 0.05


def test_debug_overfit_trains_on_without_early_stopping(tmp_path):
    cfg = compose(["debug=overfit"])
    assert cfg.callbacks.early_stopping is None and cfg.trainer.overfit_batches == 2
    assert cfg.callbacks.model_checkpoint is not None
    # An experiment whose early stopping stops at the second validation; debug=overfit trains on.
    (tmp_path / "configs" / "experiment").mkdir(parents=True)
    (tmp_path / "configs" / "experiment" / "stops_early.yaml").write_text(
        "# @package _global_\ndefaults:\n  - digits_mlp\ncallbacks:\n  early_stopping:\n    patience: 0\n"
        "    min_delta: 1000.0\n"
    )
    run = [
        f"hydra.searchpath=[file://{tmp_path / 'configs'}]",
        "experiment=stops_early",
        "model.hidden_sizes=[16]",
        "trainer.max_epochs=4",
        "datamodule.batch_size=32",
        "logger=csv",
        *QUIET,
    ]
    stopped = fit(compose(run), output_dir=str(tmp_path / "plain"))
    assert stopped["epochs"] == 2
    results = fit(compose([*run, "debug=overfit", "trainer.max_epochs=4"]), output_dir=str(tmp_path / "overfit"))
    assert results["status"] == "completed" and results["epochs"] == 4 and results["steps"] == 8


def test_early_stopping_on_a_metric_never_logged_warns_once(tiny_cfg, tmp_path, caplog):
    fit(tiny_cfg("callbacks.early_stopping.monitor=val/accuracy", *QUIET), output_dir=str(tmp_path))
    warnings = [r.getMessage() for r in caplog.records if "callbacks.early_stopping.monitor" in r.getMessage()]
    assert len(warnings) == 1 and "'val/accuracy' has not been logged (logged: ['val/acc', 'val/loss'])" in warnings[0]


def test_sanity_check_fails_a_broken_validation_loop_before_any_training(tiny_cfg, tmp_path, monkeypatch):
    from framework.tasks import ClassificationTask

    real = ClassificationTask.step

    def broken(self, model, batch, stage):
        if stage == "val":
            raise RuntimeError("bug in the validation step")
        return real(self, model, batch, stage)

    monkeypatch.setattr(ClassificationTask, "step", broken)
    with pytest.raises(RuntimeError, match="bug in the validation step"):
        fit(tiny_cfg(), output_dir=str(tmp_path))
    assert not (tmp_path / "metrics.csv").exists()  # failed before the first training step was logged


@pytest.mark.parametrize("profiler,artifact", [("simple", "profile.txt"), ("pytorch", "profiler")])
def test_profilers_write_their_report(tiny_cfg, tmp_path, profiler, artifact):
    fit(tiny_cfg(f"trainer.profiler={profiler}"), output_dir=str(tmp_path))
    path = tmp_path / artifact
    assert path.exists()
    if profiler == "simple":
        assert "optimizer step" in path.read_text() and "validation" in path.read_text()
    else:
        assert any(p.name.endswith(".pt.trace.json") for p in path.iterdir())


def test_lr_monitor_logs_the_schedule(tiny_cfg, tmp_path):
    fit(tiny_cfg("callbacks=lr_monitor", "scheduler=onecycle"), output_dir=str(tmp_path))
    with open(tmp_path / "metrics.csv") as f:
        lrs = [float(r["lr-Adam"]) for r in csv.DictReader(f) if r.get("lr-Adam")]
    assert len(lrs) == 12 and max(lrs) > lrs[0] and lrs[-1] < max(lrs)  # one-cycle: up, then down


def test_backbone_finetuning_unfreezes_with_its_own_learning_rate(tmp_path):
    cfg = compose(
        [
            "experiment=digits_cnn",
            "callbacks=backbone_finetuning",
            "trainer.max_epochs=2",
            "trainer.limit_train_batches=3",
            "callbacks.backbone_finetuning.unfreeze_at_epoch=1",
            "+callbacks.groups._target_=tests.helpers.probes.ParamGroups",
            "logger=none",
            *QUIET,
            f"output_dir={tmp_path}",
        ]
    )
    trainer, parts = build_trainer(cfg)
    trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory)
    head_only, with_backbone = parts.callbacks["groups"].seen
    assert len(head_only) == 1 and len(with_backbone) == 2
    assert with_backbone[1][1] == pytest.approx(with_backbone[0][1] * 0.1)


def test_throughput_callback_logs_samples_per_second(tiny_cfg, tmp_path):
    fit(tiny_cfg("callbacks=throughput", "callbacks.throughput.log_every_n_steps=4"), output_dir=str(tmp_path))
    with open(tmp_path / "metrics.csv") as f:
        rates = [float(r["throughput/samples_per_s"]) for r in csv.DictReader(f) if r.get("throughput/samples_per_s")]
    assert len(rates) == 3 and all(r > 0 for r in rates)


def test_compile_runs_compiled_code_with_the_same_results(tiny_cfg, tmp_path):
    probe = [
        "model._target_=tests.helpers.probes.CompileProbe",
        "~model.hidden_sizes",
        "~model.dropout",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=3",
    ]
    eager = fit(tiny_cfg(*probe), output_dir=str(tmp_path / "e"))
    assert CompileProbe.compiled_calls == 0
    compiled = fit(tiny_cfg(*probe, "trainer.compile=true"), output_dir=str(tmp_path / "c"))
    assert CompileProbe.compiled_calls > 0  # forwards ran as compiled code, not eager Python
    assert compiled["metrics"]["val/loss"] == pytest.approx(eager["metrics"]["val/loss"], rel=1e-4)


def test_throughput_counts_flops_and_logs_mfu_with_a_given_peak(tiny_cfg, tmp_path):
    cfg = tiny_cfg(
        "callbacks=throughput",
        "callbacks.throughput.log_every_n_steps=4",
        "callbacks.throughput.peak_flops=1e12",
        "logger=csv",
        f"output_dir={tmp_path}",
    )
    trainer, parts = build_trainer(cfg)
    trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory)
    # forward FLOPs of the 64 -> 32 -> 10 MLP, x3 for forward + backward
    assert parts.callbacks["throughput"].flops_per_sample == 3 * 2 * (64 * 32 + 32 * 10)
    assert 0 < trainer.logged_metrics["throughput/mfu"] < 1


@pytest.mark.gpu
def test_throughput_counts_flops_on_the_batch_on_the_device(tiny_cfg, tmp_path):
    # current_batch is the batch after it moved to the GPU: the FLOP count runs the model on it.
    results = fit(
        tiny_cfg("trainer.accelerator=cuda", "callbacks=throughput", "callbacks.throughput.log_every_n_steps=4"),
        output_dir=str(tmp_path),
    )
    assert results["status"] == "completed" and results["metrics"]["throughput/mfu"] > 0
