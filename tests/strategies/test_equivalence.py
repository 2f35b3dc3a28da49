"""The core promise: same seed and global batch give the same losses and weights on every strategy.

Each distributed run is real: 2 (or 4) gloo ranks started by the elastic agent or spawn.
"""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from tests.helpers.configs import BASE as _BASE
from tests.helpers.configs import GROUPS, METRICS, train_losses

# Parameter groups and epoch metrics take part in every run of this module.
BASE = [*_BASE, *GROUPS, *METRICS]


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    results = fit(compose(BASE + ["strategy=single"]), output_dir=str(out))
    return out, results


CASES = {
    "ddp": ["strategy=ddp", "trainer.devices=2"],
    "ddp_spawn": ["strategy=ddp_spawn", "trainer.devices=2"],
    "zero": ["strategy=zero", "trainer.devices=2"],
    "fsdp_full": ["strategy=fsdp", "trainer.devices=2", "strategy.sharding=full", "strategy.wrap_classes=[Linear]"],
    "fsdp_grad_op": ["strategy=fsdp", "trainer.devices=2", "strategy.sharding=grad_op"],
    "hsdp_2x2": [
        "strategy=hsdp",
        "trainer.devices=4",
        "strategy.replicate=2",
        "strategy.shard=2",
        "trainer.oversubscribe=true",
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_strategy_matches_single_device(case, single, tmp_path):
    single_dir, single_results = single
    results = fit(compose(BASE + CASES[case]), output_dir=str(tmp_path))
    assert results["status"] == "completed"
    assert results["world_size"] == int(CASES[case][1].split("=")[1])
    assert results["steps"] == single_results["steps"] == 6
    assert (tmp_path / "ranks" / "1" / "train.log").exists()

    expected, got = train_losses(single_dir), train_losses(tmp_path)
    assert len(got) == len(expected) == 6
    assert got == pytest.approx(expected, rel=1e-5)
    for key in (
        "val/loss",
        "val/acc",
        "test/loss",
        "test/acc",
        "val/f1",
        "val/auroc",
        "test/f1",
        "test/auroc",
        "train/f1",
        "train/auroc",
    ):
        assert results["metrics"][key] == pytest.approx(single_results["metrics"][key], rel=1e-5), key

    ref = torch.load(single_dir / "model.pt")
    weights = torch.load(tmp_path / "model.pt")
    assert set(weights) == set(ref)
    for name, tensor in ref.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-5, atol=1e-7, msg=name)


TINY_VAL = [
    "experiment=digits_mlp",
    "datamodule=synthetic",
    "datamodule.input_shape=[8]",
    "datamodule.num_samples=200",
    "datamodule.val_fraction=0.005",
    "datamodule.batch_size=16",
    "trainer.max_epochs=1",
    "logger=none",
    "callbacks=none",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "strategy.timeout_s=60",
]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_rank_without_validation_samples_still_joins(strategy, tmp_path):
    # 1 validation sample, 2 ranks: rank 1 has nothing to evaluate, yet must take part in
    # the reduction (ddp) and in every sharded forward (fsdp). Metrics equal single device's.
    # The epoch metrics' states are gathered from it too (AUROC's are concatenated: empty there).
    single = fit(compose(TINY_VAL + METRICS + ["strategy=single"]), output_dir=str(tmp_path / "single"))
    results = fit(
        compose(TINY_VAL + METRICS + [f"strategy={strategy}", "trainer.devices=2"]), output_dir=str(tmp_path / strategy)
    )
    assert results["status"] == "completed"
    for key in ("val/loss", "val/acc", "test/loss", "test/acc", "val/f1", "val/auroc", "test/f1"):
        assert results["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5), key
