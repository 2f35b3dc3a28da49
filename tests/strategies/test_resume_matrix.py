"""Any checkpoint resumes under any strategy and world size, optimizer state included."""

from __future__ import annotations

import pytest

from framework import compose, fit
from framework.engine.signals import Interrupted
from tests.helpers.configs import BASE as _BASE
from tests.helpers.configs import GROUPS, val_losses
from tests.helpers.layouts import EPOCH_CHECKPOINTS, assert_resumes_from_epoch0, runs_once

# Parameter groups take part in every run of this module.
BASE = [*_BASE, *GROUPS]

CKPT = [*EPOCH_CHECKPOINTS, "strategy.timeout_s=60"]
STRATEGIES = {
    "single": ["strategy=single"],
    "ddp": ["strategy=ddp", "trainer.devices=2"],
    "zero": ["strategy=zero", "trainer.devices=2"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2", "strategy.wrap_classes=[Linear]"],
}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Each strategy's uninterrupted run (its epoch-0 checkpoint is the resume point), made once."""
    return runs_once(tmp_path_factory, [*BASE, *CKPT], STRATEGIES)


@pytest.mark.parametrize("target", list(STRATEGIES))
@pytest.mark.parametrize("source", list(STRATEGIES))
def test_resume_from_any_strategy_under_any_other(saved, tmp_path, source, target):
    # steps 4..9 after the epoch-0 checkpoint: Adam's moments came along, or these would differ
    assert_resumes_from_epoch0([*BASE, *CKPT, *STRATEGIES[target]], saved(source)[0], tmp_path, saved("single")[0])


def test_a_ddp_resume_restores_each_ranks_batchnorm_statistics(tmp_path):
    # Each rank's BatchNorm running statistics come from its own slice of the data; a checkpoint
    # holds one copy of a replicated tensor, so without each rank's own buffers a resumed run's
    # validation (and, through DDP's buffer broadcast, its statistics) would drift from the straight run.
    run = [
        "experiment=digits_cnn",
        "datamodule.batch_size=32",
        "trainer.limit_train_batches=6",
        "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false",
        "logger=csv",
        "seed=3",
        "strategy=ddp",
        "trainer.devices=2",
        "trainer.max_epochs=3",
        "scheduler=none",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
    ]
    straight = fit(compose(run), output_dir=str(tmp_path / "straight"))
    stop = ["+callbacks.stop._target_=tests.helpers.probes.SignalAt", "+callbacks.stop.step=8"]  # mid-epoch 1
    with pytest.raises(Interrupted):
        fit(compose([*run, *stop]), output_dir=str(tmp_path / "resumed"))
    resumed = fit(compose([*run, "ckpt_path=last"]), output_dir=str(tmp_path / "resumed"))
    assert val_losses(tmp_path / "resumed") == pytest.approx(val_losses(tmp_path / "straight"), rel=1e-6)
    assert resumed["metrics"]["test/loss"] == pytest.approx(straight["metrics"]["test/loss"], rel=1e-6)
