"""DDP2 (Lightning's former strategy): one process per node, DataParallel over that node's GPUs,
DDP across nodes.

Requires CUDA: ``trainer.devices`` GPUs per node, one process per node (so the world size
is ``trainer.num_nodes``); the global batch splits across nodes, then DataParallel splits
each node's share over its GPUs. Multi-node runs start through torchrun
(``--nproc-per-node 1``) or SLURM (one task per node).
"""
from __future__ import annotations

from typing import Callable

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from framework.strategies.ddp import DDPConfig, register_comm_hook
from framework.strategies.base import Strategy


class DDP2Strategy(Strategy):
    name = "ddp2"
    schema = DDPConfig  # ddp's options
    needs_process_group = True

    @classmethod
    def check(cls, trainer: dict, options: dict, accelerator: str, problems: list[str]) -> None:
        if accelerator != "cuda":
            problems.append(f"strategy=ddp2: DataParallel within a node needs CUDA devices "
                            f"(trainer.accelerator={accelerator}); use strategy=ddp")

    def setup(self, model: nn.Module, optimizer_factory: Callable | None):
        devices = self.devices
        # DataParallel keeps the parameters on its first device, so DDP sees a
        # single-device module and all-reduces its gradients across nodes.
        inner = nn.DataParallel(model.to(self.device), device_ids=list(range(devices)))
        ddp = DistributedDataParallel(inner, device_ids=None,
                                      find_unused_parameters=self.options.get("find_unused_parameters", False))
        register_comm_hook(ddp, self.options.get("comm_hook", "none"), self.options.get("powersgd_rank", 1))
        return ddp, (optimizer_factory(ddp.parameters()) if optimizer_factory else None)

    def unwrap(self, model: nn.Module) -> nn.Module:
        while isinstance(model, (DistributedDataParallel, nn.DataParallel)):
            model = model.module
        return model

    def no_sync(self, model: nn.Module):
        return model.no_sync()
