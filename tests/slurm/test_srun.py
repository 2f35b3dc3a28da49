"""Ranks started by a real SLURM (srun inside an allocation) join one process group; the
losses equal single device's."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from framework import compose, fit
from tests.helpers.configs import BASE, train_losses


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    fit(compose(BASE + ["strategy=single"]), output_dir=str(out))
    return out


@pytest.mark.parametrize("strategy", [["strategy=ddp"], ["strategy=fsdp", "strategy.wrap_classes=[Linear]"]])
def test_srun_tasks_join_one_group_with_single_device_losses(slurm, single, tmp_path, strategy):
    proc = slurm.run(
        "srun",
        "-N1",
        "-n2",
        sys.executable,
        "-m",
        "framework.train",
        *BASE,
        *strategy,
        "trainer.devices=2",
        f"hydra.run.dir={tmp_path}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "completed" and results["world_size"] == 2 and results["strategy"] == strategy[0][9:]
    assert train_losses(tmp_path) == pytest.approx(train_losses(single), rel=1e-5)
    ref, got = torch.load(single / "model.pt"), torch.load(tmp_path / "model.pt")
    for name, tensor in ref.items():
        torch.testing.assert_close(got[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
