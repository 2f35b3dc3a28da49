"""Tensor parallelism on the built-in transformer: tp, fsdp_tp (2-D) and hsdp x tp (3-D) give single
device's losses with clipping and accumulation; any of {single, fsdp, tp, fsdp_tp} resumes any other;
bad layouts are refused before any process starts, naming the key."""

from __future__ import annotations

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import GPT_EQUIVALENCE, GPT_RESUME, assert_same_as_single, runs_once

EQUIVALENCE = GPT_EQUIVALENCE
LAYOUTS = {
    "single": ["strategy=single"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
    "tp": ["strategy=tp", "trainer.devices=2"],
    # the norms whole on every rank (replicated DTensors beside the split weights), clipping over both
    "tp_without_sequence_parallel": ["strategy=tp", "trainer.devices=2", "strategy.sequence_parallel=false"],
    "fsdp_tp": ["strategy=fsdp_tp", "trainer.devices=4", "strategy.tensor_parallel=2", "trainer.oversubscribe=true"],
    "hsdp_tp": [
        "strategy=fsdp_tp",
        "trainer.devices=4",
        "strategy.tensor_parallel=2",
        "strategy.replicate=2",
        "trainer.oversubscribe=true",
    ],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return runs_once(tmp_path_factory, EQUIVALENCE, LAYOUTS)("single")


@pytest.mark.parametrize("layout", ["tp", "tp_without_sequence_parallel", "fsdp_tp", "hsdp_tp"])
def test_tensor_parallel_layouts_match_single_device(layout, single, tmp_path):
    results = fit(compose([*EQUIVALENCE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert_same_as_single(tmp_path, results, *single)


@pytest.mark.parametrize("layout", ["tp", "fsdp_tp"])
def test_the_plan_predicts_each_ranks_model_state(layout, tmp_path):
    # the default transformer (3.6M parameters), one step: parameters, gradients and AdamW's state per
    # rank against the prediction from its plan (norms whole on every rank, the rest split)
    results = fit(
        compose(
            [
                *(o for o in GPT_TINY if not o.startswith("model=")),
                "model=gpt",
                "callbacks=none",
                "trainer.max_steps=1",
                "trainer.limit_val_batches=0",
                "test=false",
                *LAYOUTS[layout],
            ]
        ),
        output_dir=str(tmp_path),
    )
    predicted = results["memory"]["predicted_model_state_bytes"]
    measured = max(results["memory"]["model_state_bytes_per_rank"])
    assert measured == pytest.approx(predicted, rel=0.05)
    assert predicted < 16 * results["memory"]["parameters"] / (1.9 if layout == "tp" else 3.8)


RESUME = GPT_RESUME
MATRIX = ["single", "fsdp", "tp", "fsdp_tp"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return runs_once(tmp_path_factory, RESUME, LAYOUTS)


@pytest.mark.parametrize("target", MATRIX)
@pytest.mark.parametrize("source", MATRIX)
def test_a_checkpoint_of_any_layout_resumes_under_any_other(saved, tmp_path, source, target):
    reference, _ = saved("single")
    source_dir, _ = saved(source)
    resumed = fit(
        compose([*RESUME, *LAYOUTS[target], f"ckpt_path={source_dir / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path),
    )
    assert resumed["steps"] == 12
    # steps 5..12 after the epoch-0 checkpoint: AdamW's moments came along (DTensor shards resharded)
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference)[4:], rel=1e-6)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["strategy=tp", "trainer.devices=2", "model.n_heads=3", "model.n_kv_heads=1", "model.dim=33"],
            "model.n_heads: 3 is not divisible by the tensor-parallel degree 2 (strategy=tp",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "model.n_kv_heads=1"],
            "model.n_kv_heads: 1 is not divisible by the tensor-parallel degree 2",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "datamodule.seq_len=33"],
            "datamodule.seq_len: 33 is not divisible by the tensor-parallel degree 2 with sequence parallelism",
        ),
        (
            ["strategy=fsdp_tp", "trainer.devices=2", "strategy.tensor_parallel=4", "trainer.oversubscribe=true"],
            "strategy.dp_replicate(1) x strategy.dp_shard(-1) x strategy.ep(1) x strategy.cp(1) x strategy.tp(4) "
            "cannot make world size 2",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "strategy.plan={layers.*.nope: colwise}"],
            "strategy.plan.layers.*.nope: matches no module of GPT",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "model=mlp", "datamodule=digits", "task=classification"],
            "strategy=tp: MLP has no tensor-parallel plan",
        ),
        (
            ["strategy=tp", "trainer.devices=2", "model.tie_embeddings=true"],
            "model.tie_embeddings: a tied embedding and output head cannot be split by the tensor-parallel plan",
        ),
    ],
)
def test_a_layout_that_does_not_fit_the_model_is_refused_before_start(overrides, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*GPT_TINY, *overrides]))
    assert any(message in problem for problem in err.value.problems), err.value.problems


FEATURES = [
    "trainer.precision=bf16-mixed",
    "trainer.activation_checkpointing=[Block]",
    "callbacks=ema",
    "callbacks.ema.decay=0.9",
    "optimizer.param_groups=[{params: '*norm*', weight_decay: 0.0}]",
    "trainer.max_steps=8",
    "trainer.gradient_clip_val=1.0",
]


def test_mixed_precision_checkpointing_ema_and_param_groups_work_with_tensor_parallelism(tmp_path):
    single = fit(compose([*GPT_TINY, *FEATURES, "strategy=single"]), output_dir=str(tmp_path / "single"))
    for layout in ("tp", "fsdp_tp"):
        results = fit(compose([*GPT_TINY, *FEATURES, *LAYOUTS[layout]]), output_dir=str(tmp_path / layout))
        assert results["status"] == "completed" and results["steps"] == 8
        # bf16 autocast: the shards' sums round differently, within bf16's precision
        assert train_losses(tmp_path / layout) == pytest.approx(train_losses(tmp_path / "single"), rel=1e-3)
        assert results["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-3)  # (the EMA's)
