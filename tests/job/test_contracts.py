"""Plug-in contracts: checked before anything runs; state keyed by name; teardown never hides an error."""

from __future__ import annotations

import json
import logging

import pytest

from framework import build_trainer, compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose([*TINY, *overrides]))
    return err.value.problems


def test_a_misspelled_callback_hook_is_a_config_error():
    [msg] = problems("+callbacks.mine._target_=tests.helpers.probes.TypoCallback")
    assert msg.startswith(
        "callbacks.mine._target_: TypoCallback.on_train_epoch_ends is not a callback hook; "
        "did you mean on_train_epoch_end?"
    )


def test_a_logger_without_finalize_is_a_config_error():
    [msg] = problems("+logger.mine._target_=tests.helpers.probes.NoFinalizeLogger")
    assert msg.startswith("logger.mine._target_: NoFinalizeLogger has no method finalize()")


def test_a_datamodule_and_task_are_checked_against_their_contracts():
    found = problems(
        "datamodule._target_=tests.helpers.probes.ParamGroups", "task._target_=tests.helpers.probes.ParamGroups"
    )
    assert any(p.startswith("datamodule._target_: ParamGroups has no method train_dataloader()") for p in found)
    assert any(p.startswith("task._target_: ParamGroups has no method step()") for p in found)


def test_a_component_answers_for_the_run_it_is_in_before_start():
    mine = "datamodule._target_=tests.helpers.probes.EvenBatchesDigits"
    found = problems(mine, "datamodule.batch_size=33", "trainer.max_epochs=0")  # with another problem: all at once
    assert "datamodule.batch_size: 33; EvenBatchesDigits wants an even batch for model MLP" in found
    assert any(p.startswith("trainer.max_epochs") for p in found)
    preflight(compose([*TINY, mine, "datamodule.batch_size=32"]))  # its answer is empty: nothing refused
    with pytest.raises(ConfigError, match="LanguageModelingTask trains on windows of tokens"):
        preflight(compose([*TINY, "task=language_modeling"]))  # the built-in task answers the same way


def test_an_error_in_teardown_does_not_hide_the_error_that_ended_the_run(tiny_cfg, tmp_path):
    # (the run's error had been a global batch larger than the data, now refused before start)
    failing = ["+callbacks.fails._target_=tests.helpers.probes.FailsAtFitStart"]
    with pytest.raises(ValueError, match="the user's callback failed at fit start"):
        fit(
            tiny_cfg(*failing, "+logger.mine._target_=tests.helpers.probes.FailingFinalizeLogger"),
            output_dir=str(tmp_path),
        )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and "the user's callback failed at fit start" in results["error"]
    assert "finalize failed" in (tmp_path / "train.log").read_text()


def test_an_error_in_teardown_of_a_good_run_fails_it(tiny_cfg, tmp_path):
    with pytest.raises(OSError, match="finalize failed"):
        fit(tiny_cfg("+logger.mine._target_=tests.helpers.probes.FailingFinalizeLogger"), output_dir=str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and "finalize" in results["error"]


def test_callback_state_follows_its_name_when_another_callback_is_removed(tmp_path, caplog):
    # Saved with [model_checkpoint, early_stopping]; resumed with early_stopping alone: its
    # state (best, wait) comes back, and the checkpoint callback's saved state is named unused.
    first = [
        "callbacks=[model_checkpoint,early_stopping]",
        "callbacks.early_stopping.patience=50",
        "callbacks.model_checkpoint.monitor=null",
        "logger=none",
    ]
    fit(compose([*TINY, *first]), output_dir=str(tmp_path / "a"))
    saved = tmp_path / "a" / "checkpoints" / "last"
    # the same 2 epochs: the resumed run is already done, so the state seen is the restored one
    trainer, parts = build_trainer(
        compose([*TINY, "callbacks=early_stopping", "logger=none", f"output_dir={tmp_path / 'b'}"])
    )
    stopper = parts.callbacks["early_stopping"]
    with caplog.at_level(logging.WARNING):
        trainer.fit(parts.model, parts.datamodule, parts.optimizer_factory, parts.scheduler, ckpt_path=saved)
    state = json.loads((tmp_path / "a" / "results.json").read_text())
    assert trainer.global_step == 12 and stopper.wait == 0
    assert stopper.best <= state["metrics"]["val/loss"] < float("inf")  # restored, not a fresh inf
    assert "not configured now: model_checkpoint" in caplog.text


def test_ddp2_refuses_the_ddp_options_it_would_ignore():
    found = problems(
        "strategy=ddp2", "strategy.static_graph=true", "strategy.bucket_cap_mb=10", "trainer.accelerator=cpu"
    )
    assert any(p.startswith("strategy.static_graph: unknown key") for p in found)
    assert any(p.startswith("strategy.bucket_cap_mb: unknown key") for p in found)
    assert any(p.startswith("strategy=ddp2: DataParallel within a node needs CUDA") for p in found)  # all at once
