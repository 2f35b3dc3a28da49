"""The engine's loop options, through the Python API on tiny configs."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from framework import build_trainer, fit
from tests.helpers.probes import ForwardDtypes


def losses(output_dir) -> list[float]:
    with open(output_dir / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def test_same_seed_same_losses_different_seed_different(tiny_cfg, tmp_path):
    runs = [fit(tiny_cfg(f"seed={s}"), output_dir=str(tmp_path / str(i))) for i, s in enumerate([3, 3, 4])]
    a, b, c = (losses(tmp_path / str(i)) for i in range(3))
    assert len(a) == 12 and a == b and a != c
    assert runs[0]["metrics"] == runs[1]["metrics"]


def test_accumulation_equals_the_larger_batch(tiny_cfg, tmp_path):
    # 2 micro-batches of 16 accumulate to the gradient of one batch of 32: same losses, same weights.
    # SGD and no dropout, so the only difference is float summation order.
    common = ["optimizer=sgd", "scheduler=none", "trainer.max_epochs=1", "trainer.limit_train_batches=1.0"]
    big = fit(tiny_cfg(*common, "datamodule.batch_size=32"), output_dir=str(tmp_path / "big"))
    acc = fit(
        tiny_cfg(*common, "datamodule.batch_size=16", "trainer.accumulate_grad_batches=2"),
        output_dir=str(tmp_path / "acc"),
    )
    assert big["steps"] == acc["steps"] == 39 and big["global_batch_size"] == acc["global_batch_size"] == 32
    assert losses(tmp_path / "big") == pytest.approx(losses(tmp_path / "acc"), rel=1e-5)
    assert big["metrics"]["val/loss"] == pytest.approx(acc["metrics"]["val/loss"], rel=1e-5)


def test_max_steps_limits_and_val_check_interval(tiny_cfg, tmp_path):
    results = fit(
        tiny_cfg(
            "trainer.max_epochs=5",
            "trainer.max_steps=9",
            "trainer.limit_train_batches=4",
            "trainer.val_check_interval=2",
        ),
        output_dir=str(tmp_path),
    )
    assert results["steps"] == 9 and results["epochs"] == 3
    with open(tmp_path / "metrics.csv") as f:
        val_steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("val/loss")]
    # every 2 training batches of each 4-batch epoch, plus the final weights at step 9
    assert val_steps == [2, 4, 6, 8, 9]


def test_limit_val_zero_skips_validation_and_fraction_limits_train(tiny_cfg, tmp_path):
    results = fit(
        tiny_cfg("trainer.limit_val_batches=0", "trainer.limit_train_batches=0.25", "trainer.max_epochs=1"),
        output_dir=str(tmp_path),
    )
    assert results["steps"] == int(1257 // 32 * 0.25)
    assert "val/loss" not in results["metrics"] and "test/acc" in results["metrics"]


def test_fast_dev_run_writes_no_logger_files_and_no_checkpoints(tiny_cfg, tmp_path):
    results = fit(tiny_cfg("debug=fdr"), output_dir=str(tmp_path))  # the debug group's trainer.fast_dev_run=true
    assert results["steps"] == 1 and results["status"] == "completed"
    assert {p.name for p in tmp_path.iterdir()} == {"config.yaml", "results.json", "train.log"}


@pytest.mark.parametrize(
    "precision,dtype", [("bf16-mixed", torch.bfloat16), ("16-mixed", torch.float16), ("32-true", torch.float32)]
)
def test_mixed_precision_computes_in_its_dtype_and_trains(tiny_cfg, tmp_path, precision, dtype):
    results = fit(
        tiny_cfg(
            f"trainer.precision={precision}",
            "trainer.max_epochs=3",
            "trainer.limit_train_batches=1.0",
            "+callbacks.dtypes._target_=tests.helpers.probes.ForwardDtypes",
        ),
        output_dir=str(tmp_path),
    )
    assert results["precision"] == precision and results["metrics"]["val/acc"] > 0.8
    # Inside forward, autocast ran every layer in the precision's dtype; the weights stay fp32.
    assert ForwardDtypes.seen and set(ForwardDtypes.seen) == {(torch.float32, dtype)}


def test_gradient_clipping_by_value_bounds_the_update(tiny_cfg, tmp_path):
    # With SGD(lr=1, no momentum) one clipped step moves every weight by at most clip_val.
    cfg = tiny_cfg(
        "optimizer=sgd",
        "optimizer.lr=1.0",
        "optimizer.momentum=0.0",
        "trainer.gradient_clip_val=0.001",
        "trainer.gradient_clip_algorithm=value",
        "trainer.max_steps=1",
        "trainer.limit_val_batches=0",
        "logger=none",
        "output_dir=" + str(tmp_path),
    )
    trainer, parts = build_trainer(cfg)
    before = [p.detach().clone() for p in parts.model.parameters()]
    trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory)
    moved = max((p - b).abs().max().item() for p, b in zip(parts.model.parameters(), before))
    assert 0 < moved <= 0.001 + 1e-7


def test_onecycle_total_steps_is_filled_from_the_run_length(tiny_cfg, tmp_path):
    results = fit(
        tiny_cfg("scheduler=onecycle", "trainer.max_epochs=2", "trainer.limit_train_batches=3"),
        output_dir=str(tmp_path),
    )
    assert results["steps"] == 6  # OneCycleLR raises if stepped past total_steps


@pytest.mark.parametrize("scheduler", ["scheduler=cosine", "scheduler=onecycle"])
def test_a_resume_with_more_epochs_stretches_a_schedule_of_the_runs_length(tiny_cfg, tmp_path, scheduler):
    """T_max / total_steps null: the run's length. Resumed with more epochs, the rest of the run follows
    the schedule of its new length (OneCycleLR had raised past its steps; a cosine climbed again)."""

    def lrs(run_dir) -> dict:
        with open(run_dir / "metrics.csv") as f:
            return {int(r["step"]): float(r["lr-Adam"]) for r in csv.DictReader(f) if r.get("lr-Adam")}

    common = [scheduler, "logger=csv", "callbacks.lr_monitor.logging_interval=step", "callbacks.early_stopping=null"]
    assert fit(tiny_cfg(*common, "trainer.max_epochs=2"), output_dir=str(tmp_path / "a"))["steps"] == 12
    resumed = fit(tiny_cfg(*common, "trainer.max_epochs=4", "ckpt_path=last"), output_dir=str(tmp_path / "a"))
    whole = fit(tiny_cfg(*common, "trainer.max_epochs=4"), output_dir=str(tmp_path / "b"))
    assert resumed["status"] == whole["status"] == "completed" and resumed["steps"] == whole["steps"] == 24
    assert "Resumed from" in (tmp_path / "a" / "train.log").read_text()
    after = {step: lr for step, lr in lrs(tmp_path / "a").items() if step > 12}
    assert len(after) >= 10 and after == pytest.approx({step: lrs(tmp_path / "b")[step] for step in after})


def test_results_json_has_every_field(tiny_cfg, tmp_path):
    fit(tiny_cfg(), output_dir=str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    for key in (
        "status",
        "experiment",
        "strategy",
        "accelerator",
        "devices",
        "num_nodes",
        "world_size",
        "global_batch_size",
        "epochs",
        "steps",
        "metrics",
        "throughput",
        "memory",
        "wall_time_s",
    ):
        assert key in results, key
    assert results["status"] == "completed" and results["experiment"] == "digits_mlp"
    assert results["strategy"] == "single" and results["world_size"] == 1 and results["global_batch_size"] == 32
    assert results["throughput"]["samples_per_s"] > 0 and results["throughput"]["step_time_ms_median"] > 0
    assert results["memory"]["peak_bytes_per_rank"][0] > 0 and results["wall_time_s"] > 0
    assert set(results["metrics"]) >= {"train/loss", "val/loss", "val/acc", "test/loss", "test/acc"}
    assert all(math.isfinite(v) for v in results["metrics"].values())


def test_failure_is_recorded_and_raised(tiny_cfg, tmp_path):
    # (it had been a global batch larger than the data: now refused before start)
    with pytest.raises(ValueError, match="the user's callback failed at fit start"):
        fit(tiny_cfg("+callbacks.fails._target_=tests.helpers.probes.FailsAtFitStart"), output_dir=str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and "the user's callback failed at fit start" in results["error"]
    assert results["failed_rank"] == 0


def test_benchmark_repeats_time_the_training_again_and_change_no_result(tiny_cfg, tmp_path):
    once = fit(tiny_cfg("logger=csv"), output_dir=str(tmp_path / "once"))
    thrice = fit(tiny_cfg("logger=csv", "benchmark_repeats=3", "seed=null"), output_dir=str(tmp_path / "thrice"))
    rates = thrice["throughput"]["samples_per_s_repeats"]
    assert len(rates) == 3 and all(r > 0 for r in rates)
    assert thrice["throughput"]["samples_per_s"] == sorted(rates)[1]  # their median
    assert "samples_per_s_repeats" not in once["throughput"]
    # the extra runs wrote nothing and logged nothing: one run's metrics, checkpoints and files
    assert sorted(p.name for p in (tmp_path / "thrice").iterdir()) == sorted(
        p.name for p in (tmp_path / "once").iterdir()
    )
    with open(tmp_path / "thrice" / "metrics.csv") as f:
        assert len([r for r in csv.DictReader(f) if r.get("train/loss")]) == thrice["steps"]
    again = fit(
        tiny_cfg("logger=csv", "benchmark_repeats=2", f"seed={thrice['seed']}"), output_dir=str(tmp_path / "again")
    )
    assert again["metrics"] == thrice["metrics"]  # the reported run is the job's own, whatever the repeats


def test_benchmark_repeats_below_one_is_refused(tiny_cfg):
    from framework.config import ConfigError
    from framework.job.preflight import preflight

    with pytest.raises(ConfigError, match="benchmark_repeats: 0; the job trains once or more"):
        preflight(tiny_cfg("benchmark_repeats=0"))
