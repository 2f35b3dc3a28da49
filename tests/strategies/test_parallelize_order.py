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
