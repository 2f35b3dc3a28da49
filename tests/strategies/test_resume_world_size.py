"""A checkpoint saved by 2 FSDP ranks resumes on 1 rank and continues the loss curve."""

from __future__ import annotations

import pytest

from framework import compose, fit
from tests.helpers.configs import BASE, train_losses

CKPT = [
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.filename='epoch{epoch}'",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.save_top_k=-1",
    "trainer.max_epochs=3",
]


def test_fsdp_two_ranks_to_one_rank(tmp_path):
    straight = fit(compose(BASE + CKPT + ["strategy=fsdp", "trainer.devices=2"]), output_dir=str(tmp_path / "fsdp"))
    ckpt = tmp_path / "fsdp" / "checkpoints" / "epoch0"
    resumed = fit(compose(BASE + CKPT + ["strategy=single", f"ckpt_path={ckpt}"]), output_dir=str(tmp_path / "one"))
    assert straight["world_size"] == 2 and resumed["world_size"] == 1
    assert resumed["steps"] == straight["steps"] == 9
    expected = train_losses(tmp_path / "fsdp")[3:]  # steps 4..9, after the epoch-0 checkpoint
    assert train_losses(tmp_path / "one") == pytest.approx(expected, rel=1e-5)
    assert resumed["metrics"]["test/acc"] == pytest.approx(straight["metrics"]["test/acc"], rel=1e-5)
