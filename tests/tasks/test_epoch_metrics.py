"""task.metrics: torchmetrics objects computed over the whole epoch, gathered across ranks."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate
from torchmetrics.classification import MulticlassF1Score

from framework import compose, fit
from framework.config.errors import ConfigError
from framework.tasks.metrics import EpochMetrics

# 301 samples: 60 validation samples, global batch 16 -> 3 full batches and a ragged one of 12
# (on 2 ranks: 8 + 8 per batch, then 6 + 6).
RAGGED = [
    "experiment=digits_mlp",
    "datamodule=synthetic",
    "datamodule.input_shape=[8]",
    "datamodule.num_samples=301",
    "datamodule.val_fraction=0.2",
    "datamodule.noise=3.0",
    "datamodule.batch_size=16",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
    "logger=none",
    "callbacks=none",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "strategy.timeout_s=60",
    "export_weights=true",
    "task.metrics={f1: {_target_: torchmetrics.classification.MulticlassF1Score, num_classes: 10, average: macro}}",
]


def test_macro_f1_on_two_ranks_equals_single_device_and_the_whole_set(tmp_path):
    single = fit(compose(RAGGED + ["strategy=single"]), output_dir=str(tmp_path / "single"))
    ddp = fit(compose(RAGGED + ["strategy=ddp", "trainer.devices=2"]), output_dir=str(tmp_path / "ddp"))
    assert ddp["status"] == single["status"] == "completed"
    for key in ("val/f1", "test/f1"):
        assert ddp["metrics"][key] == pytest.approx(single["metrics"][key], abs=1e-6), key

    # The value is F1 over all 60 validation samples at once (not a mean of per-batch F1s).
    cfg = compose(RAGGED)
    datamodule, model = instantiate(cfg.datamodule), instantiate(cfg.model, _convert_="all")
    model.load_state_dict(torch.load(tmp_path / "single" / "model.pt"))
    datamodule.setup("fit")
    inputs, labels = _stack(datamodule.val_set)
    assert len(labels) == 60
    with torch.no_grad():
        whole = MulticlassF1Score(num_classes=10, average="macro")(model(inputs), labels).item()
    assert single["metrics"]["val/f1"] == pytest.approx(whole, abs=1e-6)
    per_batch = [
        MulticlassF1Score(num_classes=10, average="macro")(model(inputs[i : i + 16]), labels[i : i + 16]).item()
        for i in range(0, 60, 16)
    ]
    assert abs(sum(per_batch) / len(per_batch) - whole) > 1e-3  # what averaging batch values would have given


def _stack(dataset):
    inputs = torch.stack([dataset[i][0] for i in range(len(dataset))])
    return inputs, torch.tensor([int(dataset[i][1]) for i in range(len(dataset))])


def test_stages_are_separate_and_discarded_forwards_do_not_count():
    metrics = EpochMetrics({"f1": MulticlassF1Score(num_classes=3, average="macro")}, ("train", "val"))
    preds, target = torch.tensor([0, 1, 2, 2]), torch.tensor([0, 1, 2, 1])
    metrics.update("val", preds, target)
    metrics.update("train", torch.tensor([0, 0]), torch.tensor([1, 2]))  # another stage's state
    metrics.update("test", preds, target)  # an untracked stage: ignored
    with metrics.paused():
        metrics.update("val", torch.tensor([0, 0]), torch.tensor([1, 2]))
    expected = MulticlassF1Score(num_classes=3, average="macro")(preds, target).item()
    assert metrics.compute("val") == {"f1": pytest.approx(expected)}
    assert not metrics.tracks("test")
    assert metrics.compute("train") == {"f1": 0.0}
    metrics.update("val", torch.tensor([1, 0]), torch.tensor([1, 1]))  # compute reset the state
    fresh = MulticlassF1Score(num_classes=3, average="macro")(torch.tensor([1, 0]), torch.tensor([1, 1])).item()
    assert metrics.compute("val") == {"f1": pytest.approx(fresh)}


def test_bad_metrics_are_refused_before_anything_runs(tmp_path):
    bad = [
        "task.metrics={nope: {_target_: torchmetrics.Nope}, lin: {_target_: torch.nn.Linear, in_features: 2, "
        "out_features: 2}, typo: {_target_: torchmetrics.classification.MulticlassF1Score, num_classes: 3, "
        "averge: macro}, three: 3, miss: {_target_: torchmetrics.classification.MulticlassF1Score, "
        "num_clases: 3}}"
    ]
    with pytest.raises(ConfigError) as err:
        fit(compose(RAGGED + bad), output_dir=str(tmp_path))
    text = str(err.value)
    assert "task.metrics.nope._target_: cannot import 'torchmetrics.Nope'" in text
    assert "task.metrics.lin: Linear is not a metric (it has no update, compute, reset)" in text
    assert "task.metrics.typo: torchmetrics.classification.MulticlassF1Score does not build" in text
    assert "averge" in text
    assert "task.metrics.three: expected a mapping" in text
    assert (
        "task.metrics.miss.num_clases: not an argument of torchmetrics.classification.MulticlassF1Score; "
        "did you mean num_classes?" in text
    )
    assert not (tmp_path / "results.json").exists()


def test_a_metric_that_fails_while_running_names_its_key(tmp_path):
    wrong = ["task.metrics={f1: {_target_: torchmetrics.classification.MulticlassF1Score, num_classes: 2}}"]
    with pytest.raises(RuntimeError, match=r"task.metrics.f1: update\(\) failed: ValueError"):
        fit(compose(RAGGED[:-1] + wrong), output_dir=str(tmp_path))
