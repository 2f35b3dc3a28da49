"""EMA and SWA callbacks: averaged weights, validated and tested, checkpointed sharded, resumed."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from framework import compose, fit
from framework.evaluate import evaluate
from tests.helpers.configs import BASE, CNN, val_losses

CKPT = [
    "callbacks.model_checkpoint.filename='epoch{epoch}'",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.save_top_k=-1",
    "trainer.max_epochs=3",
    "strategy.timeout_s=60",
    "trainer.accumulate_grad_batches=1",
]
EMA = [*BASE, *CKPT, "callbacks=[model_checkpoint,ema]", "callbacks.ema.decay=0.7", "test_ckpt=last"]


def _checkpoint(path) -> dict:
    """A checkpoint directory's whole torch.distributed.checkpoint state, in one dict."""
    full = path.parent / f"{path.name}.pt"
    dcp_to_torch_save(str(path), str(full))
    return torch.load(full, weights_only=False)


@pytest.fixture(scope="module")
def ema_single(tmp_path_factory):
    out = tmp_path_factory.mktemp("ema_single")
    return out, fit(compose([*EMA, "strategy=single"]), output_dir=str(out))


def test_ema_validates_on_the_average_and_checkpoints_it(ema_single, tmp_path):
    out, results = ema_single
    plain = fit(compose([*BASE, *CKPT, "callbacks=[model_checkpoint]", "strategy=single"]), output_dir=str(tmp_path))
    assert val_losses(out)[0] != pytest.approx(val_losses(tmp_path)[0], rel=1e-3)  # the average is validated
    saved = _checkpoint(out / "checkpoints" / "epoch0")
    assert set(saved["callbacks"]["ema"]) == set(saved["model"])
    assert not torch.equal(saved["callbacks"]["ema"]["body.1.weight"], saved["model"]["body.1.weight"])
    # the model in the checkpoint is the trained weights: the runs with and without EMA train alike
    assert results["metrics"]["train/loss"] == pytest.approx(plain["metrics"]["train/loss"], rel=1e-6)
    # testing the checkpoint later tests its average, as the run's own test did
    again = evaluate(str(out / "checkpoints" / "last"), output_dir=str(tmp_path / "eval"))
    assert again["metrics"]["test/loss"] == pytest.approx(results["metrics"]["test/loss"], rel=1e-6)


def test_ema_on_sharded_ranks_equals_single_and_resumes_under_another_world_size(ema_single, tmp_path):
    single_dir, single = ema_single
    # grad_op keeps gathered weights between forwards: the swap must still reach every forward
    fsdp = fit(
        compose([*EMA, "strategy=fsdp", "trainer.devices=2", "strategy.sharding=grad_op"]),
        output_dir=str(tmp_path / "fsdp"),
    )
    assert val_losses(tmp_path / "fsdp") == pytest.approx(val_losses(single_dir), rel=1e-5)
    assert fsdp["metrics"]["test/loss"] == pytest.approx(single["metrics"]["test/loss"], rel=1e-5)
    # the sharded average of epoch 0 resumes on one device: the same averages afterwards
    resumed = fit(
        compose([*EMA, "strategy=single", f"ckpt_path={tmp_path / 'fsdp' / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path / "resumed"),
    )
    assert resumed["steps"] == single["steps"]
    assert val_losses(tmp_path / "resumed") == pytest.approx(val_losses(single_dir)[1:], rel=1e-5)


def test_ema_of_a_batchnorm_model_on_sharded_ranks(tmp_path):
    # FSDP2 shards the parameters (DTensors) but not BatchNorm's statistics (plain tensors)
    run = [
        *CNN,
        "callbacks=[model_checkpoint,ema]",
        "callbacks.ema.decay=0.7",
        "callbacks.model_checkpoint.monitor=null",
        "strategy=fsdp",
        "trainer.devices=2",
    ]
    assert fit(compose(run), output_dir=str(tmp_path))["status"] == "completed"
    average = _checkpoint(tmp_path / "checkpoints" / "last")["callbacks"]["ema"]
    assert "features.1.running_mean" in average and "features.0.weight" in average


def test_swa_gives_the_model_the_mean_of_its_epoch_end_weights(tmp_path):
    run = [
        *BASE,
        *CKPT,
        "callbacks=[model_checkpoint,swa]",
        "callbacks.swa.swa_epoch_start=1",
        "strategy=single",
        "export_weights=true",
    ]
    results = fit(compose(run), output_dir=str(tmp_path))
    assert results["status"] == "completed"
    assert results["test_ckpt"]["weights"] == "final"  # test_ckpt's default with swa: the averaged model
    ends = [_checkpoint(tmp_path / "checkpoints" / f"epoch{e}")["model"] for e in (1, 2)]
    exported = torch.load(tmp_path / "model.pt")
    for name, tensor in exported.items():
        torch.testing.assert_close(tensor, (ends[0][name] + ends[1][name]) / 2, msg=name)
    assert not torch.equal(exported["body.1.weight"], ends[1]["body.1.weight"])
