"""The Trainer alone, with a fake in-process strategy (tests/helpers/fakes.py): accumulation, the
stop reasons, evaluation weighting, hook order, the order of model preparation, loop state."""

from __future__ import annotations

import signal

import pytest
import torch

from tests.helpers.fakes import AllHooks, FakeStrategy, TinyData, TinyTask, fit, unit_trainer


def test_accumulation_reduces_gradients_on_the_last_micro_batch_of_each_window_only():
    strategy = FakeStrategy()
    trainer = fit(unit_trainer(strategy, accumulate_grad_batches=3), TinyData(n=28, batch=4))  # 7 batches: 3+3+1
    assert trainer.global_step == 3 and trainer.state.current_epoch == 1  # one epoch of 7 batches, done
    assert strategy.calls == [
        "parallelize",
        "no_sync",
        "no_sync",
        "optimizer_step",
        "no_sync",
        "no_sync",
        "optimizer_step",
        "optimizer_step",
    ]
    assert trainer.global_batch_size == 12 and trainer.train_samples == 28


class _SignalAfter:
    def __init__(self, signals, step):
        self.signals, self.step = signals, step

    def on_train_step_end(self, trainer, loss):
        if trainer.global_step == self.step:
            self.signals.received = signal.SIGTERM


class _Signals:
    received = None


def test_a_stop_signal_stops_the_run_at_the_next_step_boundary():
    signals = _Signals()
    trainer = fit(unit_trainer(callbacks=[_SignalAfter(signals, 2)], signals=signals, max_epochs=5))
    assert trainer.interrupted == signal.SIGTERM and trainer.global_step == 3 and trainer.should_stop


class _StopAt:
    def __init__(self, step):
        self.step = step

    def on_train_step_end(self, trainer, loss):
        if trainer.global_step == self.step:
            trainer.should_stop = True


def test_a_requested_stop_waits_for_min_steps_but_a_signal_would_not():
    trainer = fit(unit_trainer(callbacks=[_StopAt(1)], max_epochs=10, min_steps=6))
    assert trainer.global_step == 6 and trainer.interrupted is None
    assert fit(unit_trainer(callbacks=[_StopAt(1)], max_epochs=10)).global_step == 1


def test_a_nonfinite_loss_marks_the_run_diverged_at_the_first_check():
    trainer = fit(unit_trainer(task=TinyTask(nan_from_step=3), log_every_n_steps=2, max_epochs=3))
    assert trainer.diverged == {"after_step": 2, "by_step": 4} and trainer.global_step == 4
    assert not trainer.check_finite()


def test_validation_means_are_weighted_by_samples_not_by_batches():
    data = TinyData(val=10, batch=4)  # validation batches of 4, 4 and 2
    trainer = fit(unit_trainer(), data)
    model = trainer.model
    x, y = data.val_set.tensors
    with torch.no_grad():
        per_sample = (model(x).squeeze(-1) - y) ** 2
    assert trainer.logged_metrics["val/loss"] == pytest.approx(per_sample.mean().item(), rel=1e-6)
    batch_means = [per_sample[i : i + 4].mean().item() for i in (0, 4, 8)]
    assert trainer.logged_metrics["val/loss"] != pytest.approx(sum(batch_means) / 3, rel=1e-6)


def test_hooks_run_in_the_documented_order():
    hooks = AllHooks()
    trainer = fit(unit_trainer(callbacks=[hooks]), TinyData(n=8, batch=4))
    trainer.test(TinyData())
    assert hooks.events == [
        "on_fit_start",
        "on_train_epoch_start",
        "on_train_batch_end",
        "on_train_step_end",
        "on_train_batch_end",
        "on_train_step_end",
        "on_validation_start",
        "on_validation_end",
        "on_train_epoch_end",
        "on_fit_end",
        "on_test_start",
        "on_test_end",
    ]


def test_the_model_reaches_the_strategy_in_the_runs_precision():
    strategy = FakeStrategy()
    trainer = unit_trainer(strategy, precision="64-true")
    fit(trainer)
    assert strategy.parallelized_dtypes == [torch.float64]
    assert trainer.logged_metrics["train/loss"] > 0


def test_loop_state_and_callback_state_round_trip_through_the_trainers_state_dict():
    class Counter:
        def __init__(self):
            self.seen = 0

        def on_train_step_end(self, trainer, loss):
            self.seen += 1

        def state_dict(self):
            return {"seen": self.seen}

        def load_state_dict(self, state):
            self.seen = state["seen"]

    trainer = fit(unit_trainer(callbacks={"counter": Counter()}, max_steps=3, max_epochs=5))
    state = trainer.state_dict()
    fresh = unit_trainer(callbacks={"counter": Counter()})
    fresh.load_state_dict(state)
    assert fresh.global_step == 3 and fresh.callbacks.callbacks[0].seen == 3
    assert fresh.logged_metrics == trainer.logged_metrics


def test_max_steps_ends_the_run_mid_epoch_and_validates_its_final_weights():
    hooks = AllHooks()
    trainer = fit(unit_trainer(callbacks=[hooks], max_steps=2, max_epochs=3), TinyData(n=16, batch=4))
    assert trainer.global_step == 2 and trainer.state.batch_in_epoch == 2
    assert hooks.events.count("on_validation_end") == 1 and trainer.state.last_val_step == 2


def test_a_run_shorter_than_the_logging_interval_says_it_logs_no_train_metric(caplog):
    with caplog.at_level("WARNING", logger="framework.engine.trainer"):
        fit(unit_trainer(max_steps=3, log_every_n_steps=10))
    assert "trainer.log_every_n_steps=10, but this run trains 3 step(s)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="framework.engine.trainer"):
        fit(unit_trainer(max_steps=3, log_every_n_steps=3))
    assert "log_every_n_steps" not in caplog.text
