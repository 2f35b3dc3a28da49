"""trainer.activation_checkpointing: the same training, fewer activations kept, on every strategy."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from framework import compose, fit
from framework.config.errors import ConfigError
from framework.job.experiment import ResolvedExperiment
from framework.plan import activation_bytes
from tests.helpers.configs import BASE, CNN, train_losses

CHECKPOINTED = ["trainer.activation_checkpointing=[Sequential]"]


def test_checkpointed_cnn_trains_exactly_as_without_and_keeps_its_names(tmp_path):
    plain = fit(compose([*CNN, "strategy=single"]), output_dir=str(tmp_path / "plain"))
    ckpt = fit(compose([*CNN, *CHECKPOINTED, "strategy=single"]), output_dir=str(tmp_path / "ckpt"))
    assert train_losses(tmp_path / "ckpt") == pytest.approx(train_losses(tmp_path / "plain"), rel=1e-6)
    assert ckpt["metrics"]["val/loss"] == pytest.approx(plain["metrics"]["val/loss"], rel=1e-6)
    ref, got = torch.load(tmp_path / "plain" / "model.pt"), torch.load(tmp_path / "ckpt" / "model.pt")
    assert list(got) == list(ref)  # the same names: checkpoints move between runs with and without it
    for name in ref:  # BatchNorm's running statistics updated once per step, not again in the recompute
        torch.testing.assert_close(got[name], ref[name], rtol=1e-6, atol=1e-7, msg=name)


@pytest.mark.parametrize("strategy", [["strategy=ddp"], ["strategy=fsdp", "strategy.wrap_classes=[Linear]"]])
def test_checkpointed_runs_on_two_ranks_equal_single_device(strategy, tmp_path):
    run = [*BASE, "trainer.activation_checkpointing=[Sequential]", "strategy.timeout_s=60"]
    single = fit(compose([*run, "strategy=single"]), output_dir=str(tmp_path / "single"))
    two = fit(compose([*run, *strategy, "trainer.devices=2"]), output_dir=str(tmp_path / "two"))
    assert two["status"] == "completed"
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "single"), rel=1e-5)
    assert two["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-5)


def test_plan_counts_what_checkpointing_saves():
    cfg = compose(CNN)
    plain = activation_bytes(ResolvedExperiment.of(cfg), 64)
    OmegaConf.update(cfg, "trainer.activation_checkpointing", ["Sequential"])
    checkpointed = activation_bytes(ResolvedExperiment.of(cfg), 64)
    assert 0 < checkpointed < plain / 10  # only the input of each checkpointed block is kept
    assert activation_bytes(ResolvedExperiment.of(cfg), 32) == pytest.approx(checkpointed / 2, rel=0.01)


def test_an_unknown_class_is_refused_with_the_models_classes(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"trainer.activation_checkpointing: no submodule of CNN is a 'Block'; its "
        r"classes: .*BatchNorm2d.*Sequential",
    ):
        fit(compose([*CNN, "trainer.activation_checkpointing=[Block]"]), output_dir=str(tmp_path))
