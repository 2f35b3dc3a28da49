"""ZeRO stage 1: DDP for gradients, optimizer state sharded with ZeroRedundancyOptimizer."""
from __future__ import annotations

from typing import Callable

from torch import nn

from framework.config.topology import Topology
from framework.strategies.ddp import DDPStrategy


class ZeroStrategy(DDPStrategy):
    name = "zero"

    @classmethod
    def predict_model_state_bytes(cls, params: int, optimizer_bytes: int, topology: Topology) -> float:
        return 8 * params + optimizer_bytes * params / topology.data_parallel_size

    def build_optimizer(self, model: nn.Module, optimizer_factory: Callable):
        from torch.distributed.optim import ZeroRedundancyOptimizer  # here: it imports FSDP's modules (~1 s)

        # The optimizer partial (e.g. Adam with lr=...) becomes the per-shard optimizer: each
        # rank keeps state for 1/N of the parameters and broadcasts its updated shard.
        return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_factory.func,
                                       **optimizer_factory.keywords)

    def checkpoint_state(self, model: nn.Module, optimizer):
        # ZeroRedundancyOptimizer's state lives in per-rank shards that DCP does not know;
        # gather it on rank 0 and keep it beside the DCP model state.
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        extra = None
        if optimizer is not None:
            optimizer.consolidate_state_dict(to=0)
            extra = optimizer.state_dict() if self.is_global_zero else None
        return {"model": get_model_state_dict(model)}, extra

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state["model"])
        if optimizer is not None and extra is not None:
            optimizer.load_state_dict(extra)  # every rank keeps its own partition of it
