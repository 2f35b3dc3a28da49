"""strategy=parallel's one parallelize order, torchtitan's: the pipeline's cut, tensor parallel,
context parallel, expert parallel, then the model made ready (activation checkpointing, compile)
on the layers as they will run, then FSDP2, then the pipeline's runner; the other strategies make
the plain model ready before they wrap it. Each step is recorded in place of its function (the
steps themselves run on several ranks in the layout tests)."""

from __future__ import annotations

from torch import nn

import framework.strategies.parallel as parallel
from framework.config.topology import Topology
from framework.strategies.ddp import DDPStrategy
from framework.strategies.parallel import ParallelConfig, ParallelStrategy


class _Mesh:
    """Any slice of it is itself: the order is what is recorded here, not the mesh."""

    def __getitem__(self, names):
        return self

    def _flatten(self, name):
        return self

    def get_group(self):
        return None

    def size(self):
        return 2


class _Recorded(ParallelStrategy):
    def mesh(self, *needed):
        return _Mesh()

    def split_stages(self, model, mesh):
        model.steps.append("pipeline cut")
        return model

    def wrap(self, model, mesh):
        model.steps.append("pipeline runner")
        return model


def _model() -> nn.Module:
    model = nn.Linear(2, 2)
    model.steps = []
    return model


def test_the_model_is_made_ready_after_its_layers_are_split_and_before_fsdp(monkeypatch):
    for name, step in [
        ("apply_tp", "tensor parallel"),
        ("apply_expert_parallel", "expert parallel"),
        ("apply_fsdp", "fsdp"),
    ]:
        monkeypatch.setattr(
            parallel, name, lambda model, *args, _step=step, **kwargs: model.steps.append(_step) or model
        )
    monkeypatch.setattr(parallel, "expert_parameters", lambda model: [])
    strategy = _Recorded(ParallelConfig(tp=2, cp=2, ep=2), "cpu", Topology(processes_per_node=8, tp=2, cp=2, ep=2))
    model = strategy.ready_and_parallelize(_model(), lambda m: m.steps.append("ready"))
    assert model.steps == ["pipeline cut", "tensor parallel", "expert parallel", "ready", "fsdp", "pipeline runner"]


def test_a_strategy_that_splits_no_layers_makes_the_plain_model_ready_before_it_wraps_it(monkeypatch):
    steps = []
    monkeypatch.setattr(DDPStrategy, "parallelize", lambda self, model: steps.append("ddp") or model)
    DDPStrategy(DDPStrategy.schema(), "cpu").ready_and_parallelize(nn.Linear(2, 2), lambda m: steps.append("ready"))
    assert steps == ["ready", "ddp"]


def test_fsdp_wraps_only_where_there_are_data_parallel_ranks_or_an_option_of_its_own(monkeypatch):
    monkeypatch.setattr(parallel, "apply_tp", lambda model, *args, **kwargs: model.steps.append("tensor parallel"))
    monkeypatch.setattr(parallel, "apply_fsdp", lambda model, *args, **kwargs: model.steps.append("fsdp") or model)

    def steps(options: ParallelConfig, topology: Topology) -> list[str]:
        return _Recorded(options, "cpu", topology).ready_and_parallelize(_model(), lambda m: None).steps

    tp_alone = Topology(processes_per_node=2, tp=2)  # strategy=tp on 2 ranks (fsdp_tp's tp=2 on 2 too)
    assert steps(ParallelConfig(dp_shard=1, tp=-1), tp_alone) == ["pipeline cut", "tensor parallel", "pipeline runner"]
    assert "fsdp" in steps(ParallelConfig(dp_shard=1, tp=-1, param_dtype="bf16"), tp_alone)  # asked for: kept
    assert steps(ParallelConfig(tp=2), Topology(processes_per_node=4, tp=2))[2] == "fsdp"  # fsdp_tp on 4
    assert "fsdp" not in steps(ParallelConfig(), Topology(processes_per_node=1))  # fsdp on one device: nothing to shard
    assert "fsdp" in steps(ParallelConfig(), Topology(processes_per_node=2))
