"""DDP2 (Lightning's former strategy): one process per node, DataParallel over that node's GPUs,
DDP across nodes.

Requires CUDA: ``trainer.devices`` GPUs per node, one process per node (so the world size
is ``trainer.num_nodes``); the global batch splits across nodes, then DataParallel splits
each node's share over its GPUs. Multi-node runs start through torchrun
(``--nproc-per-node 1``) or SLURM (one task per node).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.base import Strategy
from framework.strategies.ddp import register_comm_hook


@dataclass
class DDP2Config(StrategyConfig):
    """The DDP options ddp2 honours; the others (static_graph, bucket_cap_mb, sync_batchnorm, ...)
    are refused rather than silently ignored."""

    name: str = "ddp2"
    find_unused_parameters: bool = False  # as strategy=ddp's
    comm_hook: Literal["none", "fp16", "bf16", "powersgd"] = "none"  # as strategy=ddp's
    powersgd_rank: int = ranged(1, low=1)  # as strategy=ddp's


class DDP2Strategy(Strategy):
    name = "ddp2"
    runs_adapters = holds_nf4 = False
    schema = DDP2Config
    needs_process_group = True

    @classmethod
    def check(cls, options: DDP2Config, topology: Topology, accelerator: str) -> list[str]:
        if accelerator != "cuda":
            return [
                f"strategy=ddp2: DataParallel within a node needs CUDA devices "
                f"(trainer.accelerator={accelerator}); use strategy=ddp"
            ]
        return []

    def parallelize(self, model: nn.Module) -> nn.Module:
        # DataParallel keeps the parameters on its first device, so DDP sees a
        # single-device module and all-reduces its gradients across nodes.
        inner = nn.DataParallel(model, device_ids=list(range(self.topology.devices_per_process)))
        ddp = DistributedDataParallel(
            inner, device_ids=None, find_unused_parameters=self.options.find_unused_parameters
        )
        register_comm_hook(ddp, self.options.comm_hook, self.options.powersgd_rank)
        return ddp

    def unwrap(self, model: nn.Module) -> nn.Module:
        while isinstance(model, (DistributedDataParallel, nn.DataParallel)):
            model = model.module
        return model

    def no_sync(self, model: nn.Module):
        return model.no_sync()
