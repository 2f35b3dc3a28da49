"""FSDP with low-precision parameters on a model with BatchNorm (one process, gloo)."""

from __future__ import annotations

import torch

from framework import compose, fit
from tests.helpers.probes import ForwardDtypes


def test_fsdp_bf16_params_keep_batchnorm_in_fp32_and_learn(tmp_path):
    # batch_norm cannot mix bf16 weights with its fp32 running statistics: BatchNorm must
    # stay fp32 while every other layer computes in bf16.
    cfg = compose(
        [
            "experiment=digits_cnn",
            "trainer.max_epochs=2",
            "trainer.enable_progress_bar=false",
            "logger=none",
            "callbacks=none",
            "strategy=fsdp",
            "strategy.param_dtype=bf16",
            "strategy.reduce_dtype=fp32",
            "+callbacks.dtypes._target_=tests.helpers.probes.ForwardDtypes",
        ]
    )
    results = fit(cfg, output_dir=str(tmp_path))
    assert results["status"] == "completed"
    # FSDP gathered the Conv2d and Linear weights in bf16 for forward, and they computed in bf16.
    assert ForwardDtypes.seen and set(ForwardDtypes.seen) == {(torch.bfloat16, torch.bfloat16)}
    assert results["metrics"]["val/acc"] > 0.4  # chance is 0.1
