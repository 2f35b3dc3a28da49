"""strategy=horovod: Horovod's algorithm on torch.distributed (2 gloo ranks)."""

from __future__ import annotations

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from framework.strategies.horovod.adasum import adasum_pair, adasum_tree
from tests.helpers.configs import BASE, train_losses


def test_adasum_matches_its_formula_on_hand_checked_vectors():
    # orthogonal gradients add up; identical ones average; opposite ones cancel... and in between
    a, b = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert torch.equal(adasum_pair(a, b), torch.tensor([1.0, 1.0]))
    assert torch.equal(adasum_pair(a, a), a)
    c, d = torch.tensor([3.0, 4.0]), torch.tensor([4.0, 3.0])  # a.b = 24, |c|^2 = |d|^2 = 25
    assert torch.allclose(adasum_pair(c, d), (1 - 24 / 50) * (c + d))  # 0.52 * [7, 7] = [3.64, 3.64]
    # four ranks: (g0 (+) g1) (+) (g2 (+) g3)
    g = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([2.0, 0.0]), torch.tensor([2.0, 0.0])]
    left, right = torch.tensor([1.0, 1.0]), torch.tensor([2.0, 0.0])  # a.b = 2, |l|^2 = 2, |r|^2 = 4
    assert torch.allclose(adasum_tree(g), (1 - 2 / 4) * left + (1 - 2 / 8) * right)  # [2.0, 0.5]
    with pytest.raises(ValueError, match="power-of-two"):
        adasum_tree(g[:3])


def test_adasum_needs_a_power_of_two_world_size():
    with pytest.raises(ConfigError, match="strategy.op=adasum: .* power-of-two number of ranks; this job has 3"):
        preflight(
            compose([*BASE, "strategy=horovod", "strategy.op=adasum", "trainer.devices=3", "datamodule.batch_size=48"])
        )


def test_horovod_average_gives_ddps_losses_and_counts_its_bytes(tmp_path):
    ddp = fit(compose([*BASE, "strategy=ddp", "trainer.devices=2"]), output_dir=str(tmp_path / "ddp"))
    hvd = fit(compose([*BASE, "strategy=horovod", "trainer.devices=2"]), output_dir=str(tmp_path / "hvd"))
    assert hvd["status"] == "completed" and hvd["world_size"] == 2 and hvd["steps"] == ddp["steps"]
    assert train_losses(tmp_path / "hvd") == pytest.approx(train_losses(tmp_path / "ddp"), rel=1e-5)
    ref, got = torch.load(tmp_path / "ddp" / "model.pt"), torch.load(tmp_path / "hvd" / "model.pt")
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    params = hvd["memory"]["parameters"]
    assert hvd["comm"] == {"bytes_per_step": 4 * params, "algorithm": "horovod/average"}  # every fp32 gradient once


def test_horovod_adasum_with_fp16_compression_trains(tmp_path):
    results = fit(
        compose(
            [
                *BASE,
                "strategy=horovod",
                "trainer.devices=2",
                "strategy.op=adasum",
                "strategy.compression=fp16",
                "trainer.max_epochs=3",
            ]
        ),
        output_dir=str(tmp_path),
    )
    losses = train_losses(tmp_path)
    assert results["status"] == "completed" and all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    # fp16: 2 bytes per gradient element, sent to the one other rank
    assert results["comm"] == {
        "bytes_per_step": 2 * results["memory"]["parameters"],
        "algorithm": "horovod/adasum/fp16",
    }


def test_a_negative_fusion_threshold_is_refused():
    with pytest.raises(
        ConfigError,
        match=r"strategy.fusion_threshold_mb: must be >= 0 \(0: one all-reduce per "
        r"gradient\), got -1",
    ):
        preflight(compose([*BASE, "strategy=horovod", "trainer.devices=2", "strategy.fusion_threshold_mb=-1"]))
