"""experiment=smollm2_lora, the shipped real model's LoRA, on 2 FSDP ranks gives one device's losses: on
SmolLM2-135M-Instruct (its GGUF converted once a session), batches of 2 sequences of 32 tokens."""

from __future__ import annotations

import pytest

from framework import compose, fit
from tests.helpers.configs import train_losses
from tests.helpers.smollm2 import gguf_file

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytestmark = pytest.mark.multiprocess

SHORT = [
    "experiment=smollm2_lora",
    "datamodule.seq_len=32",
    "datamodule.batch_size=2",
    "trainer.max_steps=4",
    "trainer.log_every_n_steps=1",
    "trainer.limit_val_batches=0",
    "trainer.val_on_start=false",
    "trainer.enable_progress_bar=false",
    "harness.on_start=false",
    "harness.tasks=[]",
    "predict=false",
    "predict_on_start=false",
    "callbacks=none",
    "logger=csv",
    "strategy.timeout_s=120",
]


def test_on_two_fsdp_ranks_it_gives_one_devices_losses(tmp_path):
    gguf_file()
    single = fit(compose(SHORT), output_dir=str(tmp_path / "single"))
    fsdp = fit(compose([*SHORT, "strategy=fsdp", "trainer.devices=2"]), output_dir=str(tmp_path / "fsdp"))
    assert single["status"] == fsdp["status"] == "completed" and fsdp["strategy"] == "fsdp"
    one, two = train_losses(tmp_path / "single"), train_losses(tmp_path / "fsdp")
    assert len(one) == len(two) == 4
    assert one == pytest.approx(two, abs=1e-5)
