"""ZeRO stage 1: DDP for gradients, optimizer state sharded with ZeroRedundancyOptimizer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

from framework.strategies.ddp import DDPConfig, DDPStrategy, apply_ddp


@dataclass
class ZeroConfig(DDPConfig):
    name: str = "zero"


class ZeroStrategy(DDPStrategy):
    name = "zero"
    schema = ZeroConfig

    def setup(self, model: nn.Module, optimizer_factory: Callable | None):
        model = apply_ddp(model.to(self.device), self.device, self.options)
        if optimizer_factory is None:
            return model, None
        # The optimizer partial (e.g. Adam with lr=...) becomes the per-shard optimizer: each
        # rank keeps state for 1/N of the parameters and broadcasts its updated shard.
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optimizer_factory.func,
                                            **optimizer_factory.keywords)
        return model, optimizer
