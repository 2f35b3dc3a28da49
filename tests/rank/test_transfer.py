"""Transfer learning: weights from another run, a fresh head, frozen parts, a report of what loaded."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight

QUIET = ["trainer.enable_progress_bar=false", "logger=none"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    out = tmp_path_factory.mktemp("pretrain")
    fit(
        compose(["experiment=digits_pretrain_0to4", "trainer.max_epochs=5", "callbacks=model_checkpoint", *QUIET]),
        output_dir=str(out),
    )
    return out / "checkpoints" / "last"


def test_finetuning_beats_training_from_scratch_for_the_same_steps(pretrained, tmp_path):
    tuned = fit(
        compose(["experiment=digits_finetune_5to9", f"init.weights={pretrained}", *QUIET]),
        output_dir=str(tmp_path / "tuned"),
    )
    scratch = fit(
        compose(["experiment=digits_finetune_5to9", "init.weights=null", *QUIET]), output_dir=str(tmp_path / "scratch")
    )
    assert tuned["steps"] == scratch["steps"] == 15
    assert tuned["metrics"]["test/acc"] > scratch["metrics"]["test/acc"] + 0.05, (tuned["metrics"], scratch["metrics"])
    report = tuned["init"]
    assert "features.0.weight" in report["loaded"] and "head.3.weight" in report["reset"]


def test_strict_loading_reports_a_new_head_size(pretrained, tmp_path):
    from framework.engine.checkpoint import load_model_weights
    from framework.models import CNN

    model = CNN([1, 8, 8], num_classes=7)
    with pytest.raises(RuntimeError, match="shape mismatch.*head.3.weight"):
        load_model_weights(pretrained, model, strict=True)
    report = load_model_weights(pretrained, model, strict=False)
    assert report["mismatched"] == ["head.3.bias", "head.3.weight"] and "features.0.weight" in report["loaded"]


def test_frozen_submodule_does_not_change(pretrained, tmp_path):
    cfg = compose(
        [
            "experiment=digits_finetune_5to9",
            f"init.weights={pretrained}",
            "init.freeze=[features]",
            "export_weights=true",
            *QUIET,
        ]
    )
    fit(cfg, output_dir=str(tmp_path))
    from framework.engine.checkpoint import load_model_weights
    from framework.models import CNN

    before = CNN([1, 8, 8], num_classes=5)
    load_model_weights(pretrained, before, strict=False)
    after = torch.load(tmp_path / "model.pt")
    assert torch.equal(after["features.0.weight"], before.state_dict()["features.0.weight"])
    assert not torch.equal(after["head.3.weight"], before.state_dict()["head.3.weight"])


def test_missing_weights_and_unknown_submodule_are_reported(tmp_path):
    with pytest.raises(ConfigError, match="init.weights: nothing at"):
        preflight(compose(["experiment=digits_finetune_5to9", f"init.weights={tmp_path}/nope"]))
    with pytest.raises(ValueError, match="init.freeze: the model has no submodule 'backbone'"):
        fit(
            compose(["experiment=digits_finetune_5to9", "init.weights=null", "init.freeze=[backbone]", *QUIET]),
            output_dir=str(tmp_path),
        )


@pytest.mark.parametrize("scheduler", ["onecycle", "cosine"])
def test_unfrozen_backbone_follows_the_schedule_at_its_lr_factor(scheduler, tmp_path):
    # The backbone's param group joins mid-run: the scheduler must drive it too (OneCycleLR
    # needs its max_lr/min_lr), at lr_factor x the head's learning rate.
    import csv

    fit(
        compose(
            [
                "experiment=digits_cnn",
                f"scheduler={scheduler}",
                "trainer.max_epochs=3",
                "trainer.limit_train_batches=4",
                "trainer.log_every_n_steps=1",
                "trainer.enable_progress_bar=false",
                "logger=csv",
                "callbacks=[lr_monitor,backbone_finetuning]",
                "callbacks.backbone_finetuning.unfreeze_at_epoch=1",
                "callbacks.backbone_finetuning.lr_factor=0.1",
            ]
        ),
        output_dir=str(tmp_path),
    )
    with open(tmp_path / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("lr-Adam/pg1")]
    assert len({r["lr-Adam/pg1"] for r in rows}) >= 2  # it changes with the schedule
    for r in rows:
        assert float(r["lr-Adam/pg1"]) == pytest.approx(0.1 * float(r["lr-Adam"]), rel=1e-6)


def test_reset_keeps_buffers_fresh_too(pretrained):
    # BatchNorm's running statistics are part of what init.reset promises to keep fresh.
    from framework.engine.transfer_learning import apply_init
    from framework.models import CNN

    trained = CNN([1, 8, 8], num_classes=5)
    from framework.engine.checkpoint import load_model_weights

    load_model_weights(pretrained, trained, strict=False)
    assert trained.features[1].running_mean.abs().sum() > 0  # the pretrained statistics are not fresh ones
    model = CNN([1, 8, 8], num_classes=5)
    report = apply_init(model, str(pretrained), reset=["features"])
    assert "features.1.running_mean" in report["reset"] and "features.1.running_mean" not in report["loaded"]
    assert torch.equal(model.features[1].running_mean, torch.zeros_like(model.features[1].running_mean))
    assert torch.equal(model.features[1].running_var, torch.ones_like(model.features[1].running_var))
    assert torch.equal(model.head[0].weight, trained.head[0].weight)  # the rest did load
