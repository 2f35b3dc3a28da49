"""Presets: a strategy name that only sets options of another's class (single is the base
Strategy; ddp_spawn, ddp_fork and ddp_notebook are ddp with ``strategy.start``; fsdp, tp, hsdp
and fsdp_tp are parallel with their degrees) resolves to that class under its own name, the option alone does
what the preset does, and the option names a preset had as a class of its own still set them."""

from __future__ import annotations

import pytest

from framework.cli.compose import compose
from framework.config import ConfigError
from framework.job.preflight import preflight
from framework.strategies import Strategy, resolve, resolved_options
from framework.strategies.ddp import DDPStrategy
from framework.strategies.parallel import ParallelStrategy

TWO = ["experiment=digits_mlp", "trainer.devices=2"]


@pytest.mark.parametrize(
    "overrides, cls, name, start",
    [
        (["strategy=single", "trainer.devices=1"], Strategy, "single", "elastic"),
        (["strategy=ddp"], DDPStrategy, "ddp", "elastic"),
        (["strategy=ddp_spawn"], DDPStrategy, "ddp_spawn", "spawn"),
        (["strategy=ddp_fork"], DDPStrategy, "ddp_fork", "fork"),
        (["strategy=ddp_notebook"], DDPStrategy, "ddp_notebook", "fork"),
        (["strategy=ddp", "strategy.start=spawn"], DDPStrategy, "ddp", "spawn"),
        (["strategy=ddp_spawn", "strategy.start=elastic"], DDPStrategy, "ddp_spawn", "elastic"),
    ],
)
def test_a_preset_is_its_class_under_its_own_name(overrides, cls, name, start):
    run = preflight(compose([*TWO, *overrides]))
    layout = resolve(run)
    resolved, typed = layout.strategy, layout.options
    assert resolved is cls and typed.name == name and resolved.start_method(typed) == start


def test_a_start_that_is_none_of_the_three_is_refused_naming_them():
    from framework.config.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        preflight(compose([*TWO, "strategy=ddp", "strategy.start=thread"]))
    [problem] = err.value.problems
    assert problem.startswith("strategy.start") and all(s in problem for s in ("elastic", "fork", "spawn"))


FOUR = ["experiment=gpt_text", "trainer.devices=4", "trainer.oversubscribe=true"]


@pytest.mark.parametrize(
    "overrides, name, degrees",
    [
        (["strategy=hsdp"], "hsdp", {"dp_replicate": 1, "dp_shard": 4}),  # one node: sharded across it
        (["strategy=hsdp", "strategy.replicate=2"], "hsdp", {"dp_replicate": 2, "dp_shard": 2}),
        (["strategy=hsdp", "strategy.shard=2"], "hsdp", {"dp_replicate": 2, "dp_shard": 2}),
        (
            ["strategy=hsdp", "strategy.dp_replicate=2", "strategy.dp_shard=2"],
            "hsdp",
            {"dp_replicate": 2, "dp_shard": 2},
        ),
        (["strategy=parallel", "strategy.dp_replicate=2"], "parallel", {"dp_replicate": 2, "dp_shard": 2}),
        (["strategy=fsdp_tp"], "fsdp_tp", {"dp_shard": 2, "tp": 2}),
        (["strategy=fsdp_tp", "strategy.tensor_parallel=4"], "fsdp_tp", {"dp_shard": 1, "tp": 4}),
        (["strategy=fsdp_tp", "strategy.replicate=2", "strategy.tp=2"], "fsdp_tp", {"dp_replicate": 2, "tp": 2}),
        (["strategy=parallel", "strategy.tp=2"], "parallel", {"dp_shard": 2, "tp": 2}),
    ],
)
def test_hsdp_and_fsdp_tp_are_parallel_with_their_degrees(overrides, name, degrees):
    run = preflight(compose([*FOUR, *overrides]))
    layout = resolve(run)
    resolved, typed, topology = layout.strategy, layout.options, layout.topology
    assert resolved is ParallelStrategy and typed.name == name
    assert {k: getattr(topology, k) for k in degrees} == degrees
    # the ranks (and config.yaml) get the preset's options in the one vocabulary: the degrees, under its name
    options = resolved_options(run)
    assert options["name"] == name and not {"replicate", "shard", "tensor_parallel"} & set(options)


@pytest.mark.parametrize("tp", ["strategy.tp=2", "strategy.tensor_parallel=2"])
def test_a_pipelines_tensor_parallel_degree_is_tp_under_its_name_before_too(tp):
    from framework.strategies.pipeline.strategy import PipelineStrategy

    run = preflight(compose([*FOUR, "strategy=pp", tp]))
    layout = resolve(run)
    resolved, typed, topology = layout.strategy, layout.options, layout.topology
    assert resolved is PipelineStrategy and (topology.pp, topology.tp) == (2, 2) and typed.tp == 2
    options = resolved_options(run)
    assert options["name"] == "pp" and options["tp"] == 2 and "tensor_parallel" not in options


@pytest.mark.parametrize(
    "given, per_rank",
    [(["strategy.pp=2"], 1), (["strategy.stages=2"], 1), (["strategy.stages=4", "strategy.stages_per_rank=2"], 2)],
)
def test_a_pipelines_ranks_are_pp_and_its_stages_before_are_read_as_them(given, per_rank):
    schedule = ["strategy.schedule=interleaved_1f1b"] if per_rank > 1 else []
    run = preflight(
        compose(["experiment=gpt_text", "trainer.devices=2", "strategy=pp", "model.n_layers=4", *schedule, *given])
    )
    layout = resolve(run)
    typed, topology = layout.options, layout.topology
    assert (typed.pp, typed.stages_per_rank, topology.pp, topology.dp_shard) == (2, per_rank, 2, 1)
    options = resolved_options(run)
    assert options["pp"] == 2 and "stages" not in options


def test_stages_that_do_not_make_whole_ranks_are_refused_naming_the_key():
    with pytest.raises(ConfigError, match="strategy.stages: 3 stages do not make strategy.stages_per_rank"):
        preflight(compose([*FOUR, "strategy=pp", "strategy.stages=3", "strategy.stages_per_rank=2"]))


@pytest.mark.parametrize(
    "given, message",
    [
        (["strategy.pp=0"], "strategy.pp: must be >= 1, or -1 for every rank the tensor-parallel groups leave; got 0"),
        (["strategy.stages=0"], "strategy.pp: must be >= 1, or -1"),
        (["strategy.stages=2", "strategy.stages_per_rank=abc"], "strategy.stages_per_rank: expected int, got str"),
        (["strategy.stages=2", "strategy.stages_per_rank=0"], "strategy.stages_per_rank: must be >= 1, got 0"),
    ],
)
def test_a_pipelines_ranks_out_of_range_are_refused_naming_the_key(given, message):
    with pytest.raises(ConfigError) as err:
        preflight(compose([*FOUR, "strategy=pp", *given]))
    assert [p for p in err.value.problems if p.startswith(message)], err.value.problems


def test_hsdp_replicates_across_nodes_and_shards_within_each_by_default():
    from framework.strategies.parallel import ParallelConfig, degrees_of

    hsdp = ParallelConfig(name="hsdp", dp_replicate=-1)
    assert degrees_of(hsdp, 8, num_nodes=2)["dp_replicate"] == 2 and degrees_of(hsdp, 8, 2)["dp_shard"] == 4
    assert degrees_of(ParallelConfig(), 8, num_nodes=2)["dp_shard"] == 8  # parallel: one replica, as before


@pytest.mark.multiprocess
def test_hsdp_by_its_defaults_trains_on_two_ranks_as_fsdp_does(tmp_path):
    # dp_replicate=-1 on one node: one replica sharded across both ranks, FSDP's losses
    from framework import fit
    from tests.helpers.configs import BASE, train_losses

    runs = {}
    for name in ("hsdp", "fsdp"):
        out = tmp_path / name
        runs[name] = fit(compose([*BASE, f"strategy={name}", "trainer.devices=2"]), output_dir=str(out))
        assert runs[name]["status"] == "completed"
    assert runs["hsdp"]["degrees"]["dp_replicate"] == 1 and runs["hsdp"]["degrees"]["dp_shard"] == 2
    assert train_losses(tmp_path / "hsdp") == pytest.approx(train_losses(tmp_path / "fsdp"), rel=1e-5)
