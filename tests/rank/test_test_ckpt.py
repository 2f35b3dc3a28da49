"""test_ckpt: the test after training runs on the best checkpoint by default when one is
monitored (lightning-hydra-template's ckpt_path="best"), or on last / the final weights."""

from __future__ import annotations

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import TINY

# mode=max on val/loss: the "best" checkpoint is the worst epoch's, so best and final differ
RUN = TINY + [
    "callbacks=default",
    "logger=csv",
    "trainer.max_epochs=3",
    "callbacks.model_checkpoint.mode=max",
    "~callbacks.early_stopping",
]


def test_best_by_default_then_last_and_final(tmp_path):
    best = fit(compose(RUN), output_dir=str(tmp_path / "best"))
    assert best["test_ckpt"]["weights"] == "best" and best["test_ckpt"]["step"] == 6  # epoch 0's end
    assert "checkpoints/epoch0-step6" in best["test_ckpt"]["path"]
    final = fit(compose(RUN + ["test_ckpt=final"]), output_dir=str(tmp_path / "final"))
    assert final["test_ckpt"] == {"weights": "final", "path": None, "step": None}
    last = fit(compose(RUN + ["test_ckpt=last"]), output_dir=str(tmp_path / "last"))
    assert last["test_ckpt"]["weights"] == "last" and last["test_ckpt"]["step"] == 18
    # the same training; the last checkpoint holds the final weights, the best does not
    assert last["metrics"]["test/loss"] == pytest.approx(final["metrics"]["test/loss"], rel=1e-6)
    assert best["metrics"]["test/loss"] != pytest.approx(final["metrics"]["test/loss"], rel=1e-3)
    # and the best's test equals evaluating that checkpoint afterwards
    again = fit(
        compose(TINY + ["train=false", f"ckpt_path={tmp_path / 'best' / 'checkpoints' / 'best'}"]),
        output_dir=str(tmp_path / "eval"),
    )
    assert again["metrics"]["test/loss"] == pytest.approx(best["metrics"]["test/loss"], rel=1e-6)


def test_without_a_monitored_checkpoint_the_final_weights_are_tested(tmp_path):
    results = fit(compose(TINY + ["callbacks=none"]), output_dir=str(tmp_path))
    assert results["test_ckpt"]["weights"] == "final"


def test_best_without_a_monitor_is_refused():
    with pytest.raises(ConfigError) as err:
        preflight(compose(TINY + ["callbacks=none", "test_ckpt=best"]))
    assert err.value.problems[0].startswith("test_ckpt: best needs a checkpoint callback that monitors a metric")
    with pytest.raises(ConfigError) as err:
        preflight(compose(TINY + ["test_ckpt=worst"]))
    assert "test_ckpt" in err.value.problems[0] and "final" in err.value.problems[0]
