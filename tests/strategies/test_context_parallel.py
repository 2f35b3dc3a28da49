"""Context parallelism (``strategy=parallel strategy.cp=N``) on the built-in transformer: each rank of a
context-parallel group trains on a part of every sequence, attention gathered across the group; the
losses, metrics and predictions are single device's, alone and with dp_shard, tp and a pipeline; a
checkpoint resumes under another layout; what cannot be split is refused before start, naming the key."""

from __future__ import annotations

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import GPT_EQUIVALENCE, GPT_RESUME, assert_same_as_single, runs_once

FOUR = ["trainer.devices=4", "trainer.oversubscribe=true"]
LAYOUTS = {
    "single": ["strategy=single"],
    "cp": ["strategy=parallel", "trainer.devices=2", "strategy.cp=2"],
    "cp_dp_shard": ["strategy=parallel", *FOUR, "strategy.cp=2", "strategy.dp_shard=2"],
    "cp_tp": ["strategy=parallel", *FOUR, "strategy.cp=2", "strategy.tp=2"],
    # a pipeline's stages on each rank's part of the sequences, FSDP across the cp group
    "pp_cp": ["strategy=parallel", *FOUR, "strategy.pp=2", "strategy.cp=2"],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return runs_once(tmp_path_factory, GPT_EQUIVALENCE, LAYOUTS)("single")


@pytest.mark.parametrize("layout", ["cp", "cp_dp_shard", "cp_tp", "pp_cp"])
def test_context_parallel_layouts_match_single_device(layout, single, tmp_path):
    results = fit(compose([*GPT_EQUIVALENCE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert_same_as_single(tmp_path, results, *single)
    assert results["degrees"]["cp"] == 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return runs_once(tmp_path_factory, GPT_RESUME, LAYOUTS)


@pytest.mark.parametrize("source, target", [("cp", "single"), ("single", "cp"), ("pp_cp", "cp")])
def test_a_context_parallel_checkpoint_resumes_under_another_layout(saved, tmp_path, source, target):
    reference, _ = saved("single")
    source_dir, _ = saved(source)
    resumed = fit(
        compose([*GPT_RESUME, *LAYOUTS[target], f"ckpt_path={source_dir / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path),
    )
    assert resumed["steps"] == 12
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference)[4:], rel=1e-6)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["strategy.cp=2", "datamodule.seq_len=33"], "datamodule.seq_len: 33 is not divisible by the context-parallel"),
        (
            ["strategy.cp=2", "strategy.tp=2", "datamodule.seq_len=34", *FOUR],
            "datamodule.seq_len: 17 is not divisible by the tensor-parallel degree 2 with sequence parallelism",
        ),
        (["strategy.cp=2", "datamodule.document_boundaries=true"], "datamodule.document_boundaries: attention within"),
        (["strategy.cp=2", "trainer.compile=blocks"], "trainer.compile: 'blocks' with context parallelism"),
        (
            ["strategy.cp=3"],
            "strategy.dp_replicate(1) x strategy.dp_shard(-1) x strategy.ep(1) x strategy.cp(3) x strategy.tp(1)",
        ),
        (
            ["strategy.cp=2", "model=mlp", "datamodule=digits", "task=classification"],
            "strategy.cp: MLP declares no context_parallel_buffers",
        ),
        (
            ["strategy.cp=2", "strategy.pp=2", "datamodule.seq_len=35", *FOUR],
            "datamodule.seq_len: 35 is not divisible by the context-parallel",
        ),
    ],
)
def test_a_layout_context_parallelism_cannot_split_is_refused_before_start(overrides, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*GPT_TINY, "strategy=parallel", "trainer.devices=2", *overrides]))
    assert any(message in problem for problem in err.value.problems), err.value.problems
