"""The predict loop: predictions of every sample, gathered to rank 0 in dataset order."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest
import torch

from framework import compose, fit
from framework.config.errors import ConfigError
from framework.predict import predict

# 245 samples, a 49-sample test split, global batch 16: on 2 ranks, rank 0 gets 25 samples (4
# batches, the last of 1) and rank 1 gets 24 (3 batches).
RUN = [
    "experiment=digits_mlp",
    "datamodule=synthetic",
    "datamodule.input_shape=[8]",
    "datamodule.num_samples=245",
    "datamodule.test_fraction=0.2",
    "datamodule.batch_size=16",
    "trainer.max_epochs=1",
    "trainer.limit_train_batches=4",
    "logger=none",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "strategy.timeout_s=60",
    "test_ckpt=last",
    "predict=true",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    results = fit(compose(RUN + ["strategy=single"]), output_dir=str(out))
    assert results["predictions"] == {"path": str(out / "predictions.pt"), "samples": 49}
    return out, torch.load(out / "predictions.pt")


def test_two_sharded_ranks_predict_what_one_device_predicts(trained, tmp_path):
    run_dir, single = trained
    # fsdp: the rank with fewer batches joins the other's sharded forwards (lockstep).
    results = predict(
        str(run_dir / "checkpoints" / "last"), ["strategy=fsdp", "trainer.devices=2"], output_dir=str(tmp_path)
    )
    assert results["status"] == "completed" and results["world_size"] == 2
    got = torch.load(tmp_path / "predictions.pt")
    assert got["prob"].shape == (49, 10)
    torch.testing.assert_close(got["prob"], single["prob"], rtol=1e-5, atol=1e-6)
    assert torch.equal(got["prediction"], single["prediction"])
    assert torch.equal(single["prediction"], single["prob"].argmax(dim=-1))


def test_cli_writes_a_csv_of_a_prefix(trained):
    run_dir, single = trained
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.predict",
            f"ckpt_path={run_dir}/checkpoints/last",
            "predict_format=csv",
            "trainer.limit_predict_batches=2",
            f"hydra.run.dir={run_dir}/p",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with open(run_dir / "p" / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 32 and list(rows[0])[:3] == ["index", "prediction", "prob_0"]
    assert [int(r["index"]) for r in rows] == list(range(32))
    assert [int(r["prediction"]) for r in rows] == single["prediction"][:32].tolist()
    probs = torch.tensor([[float(r[f"prob_{c}"]) for c in range(10)] for r in rows])
    torch.testing.assert_close(probs, single["prob"][:32], rtol=0, atol=1e-7)


def test_predict_needs_a_predict_dataloader(tmp_path):
    with pytest.raises(
        ConfigError,
        match="predict: true, but datamodule._target_ tests.helpers.probes.NoPredictDigits has no predict_dataloader",
    ):
        fit(
            compose(
                RUN
                + [
                    "datamodule._target_=tests.helpers.probes.NoPredictDigits",
                    "~datamodule.input_shape",
                    "~datamodule.num_samples",
                    "~datamodule.test_fraction",
                ]
            ),
            output_dir=str(tmp_path),
        )
