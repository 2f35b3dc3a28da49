"""Lightning's trainer flags: min_epochs/min_steps, max_time, *-true precisions,
reload_dataloaders_every_n_epochs, enable_checkpointing, enable_model_summary, detect_anomaly."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY, train_losses
from tests.helpers.probes import CountingDigits, ForwardDtypes, GlobalFlags

RUN = TINY + ["callbacks=default", "logger=csv"]


def test_early_stopping_waits_for_min_epochs(tmp_path):
    # patience 0 and an impossible min_delta: early stopping asks to stop at the first validation
    cfg = compose(
        RUN
        + [
            "trainer.max_epochs=6",
            "trainer.min_epochs=4",
            "callbacks.early_stopping.patience=0",
            "callbacks.early_stopping.min_delta=10",
        ]
    )
    results = fit(cfg, output_dir=str(tmp_path))
    assert results["status"] == "completed" and results["epochs"] == 4 and results["steps"] == 24
    without = fit(
        compose(
            RUN
            + ["trainer.max_epochs=6", "callbacks.early_stopping.patience=0", "callbacks.early_stopping.min_delta=10"]
        ),
        output_dir=str(tmp_path / "without"),
    )
    assert without["epochs"] == 2  # its first validation sets the best, the second stops


@pytest.mark.parametrize("devices", [1, 2])
def test_max_time_ends_a_completed_run_after_the_same_step_on_every_rank(devices, tmp_path):
    cfg = compose(
        RUN
        + [
            "trainer.max_time={seconds: 0.001}",
            "trainer.max_epochs=50",
            f"trainer.devices={devices}",
            "strategy.timeout_s=60",
            "+callbacks.outlast._target_=tests.helpers.probes.OutlastAtFirstStep",
        ]
    )
    results = fit(cfg, output_dir=str(tmp_path))
    # requested after step 1; the request goes out with step 2's stop vote, which every rank
    # reads at step 3 (one process reads its own vote at once)
    assert results["status"] == "completed" and results["steps"] == (2 if devices == 1 else 3)
    assert {"val/loss", "test/loss"} <= set(results["metrics"])
    state = torch.load(tmp_path / "checkpoints" / "last" / "trainer.pt", weights_only=False)
    assert state["callbacks"]["timer"]["time_elapsed"] > 0.001


def test_true_precisions_put_weights_inputs_and_compute_in_the_dtype(tmp_path):
    probe = ["+callbacks.dtypes._target_=tests.helpers.probes.ForwardDtypes"]
    assert (
        fit(compose(RUN + probe + ["trainer.precision=bf16-true"]), output_dir=str(tmp_path / "bf16"))["status"]
        == "completed"
    )
    assert set(ForwardDtypes.seen) == {(torch.bfloat16, torch.bfloat16)}
    fit(compose(RUN + probe + ["trainer.precision=64-true"]), output_dir=str(tmp_path / "64"))
    assert set(ForwardDtypes.seen) == {(torch.float64, torch.float64)}
    fit(compose(RUN + ["trainer.precision=32-true"]), output_dir=str(tmp_path / "32"))
    assert train_losses(tmp_path / "64") == pytest.approx(train_losses(tmp_path / "32"), rel=1e-4)


def test_reload_dataloaders_every_n_epochs_calls_the_datamodule_again(tmp_path):
    CountingDigits.calls = []
    cfg = compose(
        RUN
        + [
            "trainer.max_epochs=5",
            "trainer.reload_dataloaders_every_n_epochs=2",
            "datamodule._target_=tests.helpers.probes.CountingDigits",
        ]
    )
    assert fit(cfg, output_dir=str(tmp_path))["steps"] == 30
    assert CountingDigits.calls == [0, 2, 4]  # at setup, then at the start of epochs 2 and 4


def test_switches_for_checkpointing_model_summary_and_anomaly_detection(tmp_path):
    cfg = compose(
        RUN
        + [
            "trainer.enable_checkpointing=false",
            "trainer.detect_anomaly=true",
            "+callbacks.flags._target_=tests.helpers.probes.GlobalFlags",
        ]
    )
    assert fit(cfg, output_dir=str(tmp_path / "off"))["status"] == "completed"
    assert not (tmp_path / "off" / "checkpoints").exists() and GlobalFlags.seen == [True]
    assert "Model summary:" in (tmp_path / "off" / "train.log").read_text()
    fit(
        compose(
            RUN + ["trainer.enable_model_summary=false", "+callbacks.flags._target_=tests.helpers.probes.GlobalFlags"]
        ),
        output_dir=str(tmp_path / "on"),
    )
    assert "Model summary:" not in (tmp_path / "on" / "train.log").read_text() and GlobalFlags.seen == [False]
    assert (tmp_path / "on" / "checkpoints" / "last").exists()


def test_bad_flag_values_are_refused_with_the_accepted_forms():
    with pytest.raises(ConfigError) as err:
        preflight(
            compose(
                TINY
                + [
                    "trainer.min_epochs=5",
                    "trainer.max_epochs=3",
                    "trainer.max_time=12:00",
                    "trainer.min_steps=-1",
                    "trainer.precision=8-true",
                ]
            )
        )
    text = "\n".join(err.value.problems)
    assert "trainer.min_epochs: 5 is above trainer.max_epochs=3" in text
    assert 'trainer.max_time: expected "DD:HH:MM:SS"' in text and "'12:00'" in text
    assert "trainer.min_steps: must be >= 0" in text
    assert "trainer.precision" in text and "bf16-true" in text


def test_val_on_start_logs_the_untrained_weights_validation_at_step_zero(tmp_path):
    import csv

    run = [*TINY, "trainer.max_epochs=1", "trainer.limit_val_batches=3"]
    assert fit(compose([*run, "trainer.val_on_start=true"]), output_dir=str(tmp_path / "on"))["status"] == "completed"
    with open(tmp_path / "on" / "metrics.csv") as f:
        rows = {int(r["step"]): r for r in csv.DictReader(f)}
    assert rows[0]["val/loss"] and float(rows[0]["val/loss"]) > float(rows[max(rows)]["val/loss"])  # before, after
    assert fit(compose(run), output_dir=str(tmp_path / "off"))["status"] == "completed"
    with open(tmp_path / "off" / "metrics.csv") as f:
        assert all(int(r["step"]) > 0 for r in csv.DictReader(f))  # the sanity check is not logged
