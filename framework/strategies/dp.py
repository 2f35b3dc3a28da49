"""DataParallel: one process drives every visible CUDA device (scatters the batch, gathers outputs)."""

from __future__ import annotations

from torch import nn

from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.base import Strategy


class DataParallelStrategy(Strategy):
    name = "dp"
    runs_adapters = holds_nf4 = False

    @classmethod
    def check(cls, options: StrategyConfig, topology: Topology, accelerator: str) -> list[str]:
        problems = []
        if topology.num_nodes != 1:
            problems.append(
                "strategy=dp: runs in one process on one machine; trainer.num_nodes must be 1 "
                "(use ddp2 or ddp across nodes)"
            )
        if accelerator != "cuda" and topology.devices_per_process > 1:
            problems.append(
                f"strategy=dp: DataParallel splits a batch over CUDA devices, but "
                f"trainer.accelerator={accelerator} with trainer.devices={topology.devices_per_process}; "
                "use strategy=ddp for several CPU processes"
            )
        return problems

    def parallelize(self, model: nn.Module) -> nn.Module:
        if self.device.type != "cuda":
            return model
        return nn.DataParallel(model, device_ids=list(range(self.topology.devices_per_process)))

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, nn.DataParallel) else model
