"""DataParallel: one process drives every visible CUDA device (scatters the batch, gathers outputs)."""
from __future__ import annotations

from typing import Callable

from torch import nn

from framework.strategies.base import Strategy


class DataParallelStrategy(Strategy):
    name = "dp"

    @classmethod
    def data_parallel_size(cls, trainer: dict, options: dict) -> int:
        return 1  # one process; DataParallel splits its batch across devices itself

    @classmethod
    def check(cls, trainer: dict, options: dict, accelerator: str, problems: list[str]) -> None:
        if trainer.get("num_nodes", 1) != 1:
            problems.append("strategy=dp: runs in one process on one machine; trainer.num_nodes must be 1 "
                            "(use ddp2 or ddp across nodes)")
        if accelerator != "cuda" and trainer.get("devices", 1) > 1:
            problems.append(f"strategy=dp: DataParallel splits a batch over CUDA devices, but "
                            f"trainer.accelerator={accelerator} with trainer.devices={trainer.get('devices')}; "
                            "use strategy=ddp for several CPU processes")

    def setup(self, model: nn.Module, optimizer_factory: Callable | None):
        model = model.to(self.device)
        if self.device.type == "cuda":
            devices = self.devices
            model = nn.DataParallel(model, device_ids=list(range(devices)))
        return model, (optimizer_factory(model.parameters()) if optimizer_factory else None)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, nn.DataParallel) else model
