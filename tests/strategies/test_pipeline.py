"""Pipeline parallelism on the built-in transformer: pp on 2 ranks (GPipe, 1F1B, interleaved 1F1B),
pp x fsdp, pp x ddp and pp x tp on 2x2 give single device's losses, metrics, predictions and weights
with clipping and accumulation; a pipeline's checkpoint resumes as single, fsdp or tp and theirs as a
pipeline; a signal to one stage stops both at one step; bad layouts are refused before any process
starts, naming the key."""

from __future__ import annotations

import json

import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.engine.signals import Interrupted
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.layouts import GPT_EQUIVALENCE, GPT_RESUME, assert_same_as_single, runs_once

EQUIVALENCE = GPT_EQUIVALENCE
LAYOUTS = {
    "single": ["strategy=single"],
    "fsdp": ["strategy=fsdp", "trainer.devices=2"],
    "tp": ["strategy=tp", "trainer.devices=2"],
    "pp_gpipe": ["strategy=pp", "trainer.devices=2", "strategy.schedule=gpipe", "strategy.microbatches=4"],
    "pp_1f1b": ["strategy=pp", "trainer.devices=2", "strategy.schedule=1f1b"],
    "pp_fsdp": ["strategy=pp/fsdp", "trainer.devices=4", "trainer.oversubscribe=true"],
    "pp_ddp": ["strategy=pp/ddp", "trainer.devices=4", "trainer.oversubscribe=true"],
    "pp_tp": ["strategy=pp", "trainer.devices=4", "strategy.tensor_parallel=2", "trainer.oversubscribe=true"],
    # the pipeline as a degree of strategy=parallel, its replicas HSDP's (sharded 1, replicated 2)
    "parallel_pp_hsdp": [
        "strategy=parallel",
        "strategy.pp=2",
        "strategy.dp_replicate=2",
        "trainer.devices=4",
        "trainer.oversubscribe=true",
    ],
}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return runs_once(tmp_path_factory, EQUIVALENCE, LAYOUTS)("single")


@pytest.mark.parametrize("layout", ["pp_gpipe", "pp_1f1b", "pp_fsdp", "pp_ddp", "pp_tp", "parallel_pp_hsdp"])
def test_pipeline_layouts_match_single_device(layout, single, tmp_path):
    results = fit(compose([*EQUIVALENCE, *LAYOUTS[layout]]), output_dir=str(tmp_path))
    assert_same_as_single(tmp_path, results, *single)
    pipeline = results["pipeline"]  # (p - 1) / (m + p - 1) with p = 2 stages
    assert (
        pipeline["stages"] == 2
        and pipeline["bubble_predicted"] == pytest.approx(1 / (pipeline["microbatches"] + 1))
        and 0 < pipeline["bubble_measured"] < 1
    )
    if layout.startswith("parallel"):  # recorded as selected, with its degrees
        assert results["strategy"] == "parallel" and results["degrees"]["pp"] == 2


def test_interleaved_1f1b_runs_two_stages_per_rank_with_single_devices_losses(tmp_path):
    four = [*EQUIVALENCE, "model.n_layers=4"]
    single = fit(compose([*four, "strategy=single"]), output_dir=str(tmp_path / "single"))
    results = fit(
        compose(
            [
                *four,
                "strategy=pp",
                "trainer.devices=2",
                "strategy.schedule=interleaved_1f1b",
                "strategy.stages_per_rank=2",
            ]
        ),
        output_dir=str(tmp_path / "pp"),
    )
    assert train_losses(tmp_path / "pp") == pytest.approx(train_losses(tmp_path / "single"), rel=1e-5)
    assert results["metrics"]["val/loss"] == pytest.approx(single["metrics"]["val/loss"], rel=1e-5)
    assert (tmp_path / "pp" / "predictions.jsonl").read_text() == (
        tmp_path / "single" / "predictions.jsonl"
    ).read_text()
    assert results["pipeline"]["stages"] == 4 and results["pipeline"]["ranks"] == 2
    # rank 0 runs stages 0 and 2 (embedding, blocks 0 and 2), rank 1 stages 1 and 3 (blocks 1 and 3, head)
    assert results["pipeline"]["bubble_predicted"] == pytest.approx(1 / (2 * 2 + 1))


RESUME = GPT_RESUME


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return runs_once(tmp_path_factory, RESUME, LAYOUTS)


@pytest.mark.parametrize(
    "source,target", [("pp_1f1b", "single"), ("single", "pp_1f1b"), ("pp_fsdp", "fsdp"), ("pp_1f1b", "tp")]
)
def test_a_pipelines_checkpoint_resumes_under_another_layout_and_back(saved, tmp_path, source, target):
    reference, _ = saved("single")
    source_dir, _ = saved(source)
    resumed = fit(
        compose([*RESUME, *LAYOUTS[target], f"ckpt_path={source_dir / 'checkpoints' / 'epoch0'}"]),
        output_dir=str(tmp_path),
    )
    assert resumed["steps"] == 12
    # steps 5..12 after the epoch-0 checkpoint: each stage's weights and AdamW moments came along
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference)[4:], rel=1e-6)


def test_a_signal_to_one_stage_stops_both_at_one_step_and_last_resumes_exactly(saved, tmp_path):
    reference, _ = saved("single")
    pp = [*RESUME, *LAYOUTS["pp_1f1b"]]
    signal = [
        "+callbacks.sig._target_=tests.helpers.probes.SignalAt",
        "+callbacks.sig.step=2",
        "+callbacks.sig.signal=SIGTERM",
        "+callbacks.sig.rank=1",
    ]
    with pytest.raises(Interrupted):
        fit(compose([*pp, *signal]), output_dir=str(tmp_path))
    stopped = json.loads((tmp_path / "results.json").read_text())
    # the last stage alone was signalled after step 2; the stages agree one step later
    assert stopped["status"] == "interrupted" and stopped["steps"] == 4 and stopped["world_size"] == 2
    assert json.loads((tmp_path / "checkpoints" / "last" / "manifest.json").read_text())["step"] == 4
    resumed = fit(compose([*pp, "ckpt_path=last"]), output_dir=str(tmp_path))
    assert resumed["status"] == "completed" and resumed["steps"] == 12
    assert train_losses(tmp_path) == pytest.approx(train_losses(reference), rel=1e-6)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (
            ["strategy=pp", "trainer.devices=2", "model.n_layers=3"],
            "strategy.pp: 2 stages (strategy.pp x strategy.stages_per_rank) do not divide the model's 3 blocks "
            "(layers) equally",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "strategy.split_points=[layers.9]"],
            "strategy.split_points: ['layers.9'] name no module of the model's sequence (valid: dropout, layers.0",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "strategy.microbatches=3"],
            "strategy.microbatches: 3 micro-batches do not divide each pipeline's batch of 8",
        ),
        (
            [
                "strategy=pp",
                "trainer.devices=3",
                "strategy.stages=2",
                "trainer.oversubscribe=true",
                "datamodule.batch_size=9",
            ],
            "strategy.pp: pipelines of 2 ranks do not divide the world size 3",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "model=mlp", "datamodule=digits", "task=classification"],
            "model: MLP cannot be split into pipeline stages (strategy=pp): "
            "a model that splits into pipeline stages has",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "strategy.schedule=interleaved_1f1b"],
            "strategy.stages_per_rank: interleaved_1f1b runs several stages on each rank; "
            "set strategy.stages_per_rank=2",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "strategy.stages_per_rank=2", "model.n_layers=4"],
            "strategy.stages_per_rank: 2 stages per rank need strategy.schedule=interleaved_1f1b",
        ),
        (
            [
                "strategy=pp/fsdp",
                "trainer.devices=4",
                "trainer.oversubscribe=true",
                "strategy.schedule=interleaved_1f1b",
                "strategy.stages_per_rank=2",
                "strategy.stages=4",
                "model.n_layers=4",
            ],
            "strategy.schedule: interleaved_1f1b with fsdp across pipelines (pp x fsdp) is not built yet",
        ),
        (
            [
                "strategy=pp",
                "trainer.devices=2",
                "strategy.schedule=interleaved_1f1b",
                "strategy.stages_per_rank=2",
                "model.n_layers=4",
                "strategy.microbatches=1",
            ],
            "strategy.microbatches: interleaved_1f1b runs rounds of one micro-batch per rank; 1 is no multiple",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "model._target_=tests.helpers.fakes.GPTCallingRemovedModules"],
            "model: GPTCallingRemovedModules's forward fails on pipeline stage 0 "
            "(tok_embeddings, dropout, layers.0) once the other stages' modules are removed: TypeError",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "strategy.split_points=[layers.1,norm]"],
            "strategy.split_points: ['layers.1', 'norm']: 2 stages begin at 1 module(s)",
        ),
        (
            ["strategy=pp", "trainer.devices=2", "model.tie_embeddings=true"],
            "model.tie_embeddings: a tied embedding and output head sit in the first and last stage",
        ),
        (["strategy=pp", "trainer.devices=2", "strategy.schedule=zb"], "strategy.schedule"),
        (
            ["strategy=pp", "trainer.devices=2", "task._target_=tests.helpers.fakes.TinyTask"],
            "task._target_: tests.helpers.fakes.TinyTask has no loss(output, targets): a pipeline runs the model",
        ),
    ],
)
def test_a_pipeline_that_does_not_fit_is_refused_before_start(overrides, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*GPT_TINY, *overrides]))
    assert any(message in problem for problem in err.value.problems), err.value.problems
