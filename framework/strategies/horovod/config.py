"""strategy=horovod's options, and what both of its classes are (the native hooks', the real
library's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.base import Strategy
from framework.strategies.horovod.adasum import is_power_of_two


@dataclass
class HorovodConfig(StrategyConfig):
    name: str = "horovod"
    op: Literal["average", "sum", "adasum"] = "average"  # how gradients are combined across ranks
    compression: Literal["none", "fp16"] = "none"  # gradients sent as fp16
    # native: these hooks on torch.distributed; horovod: horovod.torch under horovodrun.
    backend: Literal["native", "horovod"] = "native"
    # Tensor fusion (Horovod's HOROVOD_FUSION_THRESHOLD): gradients are all-reduced together, one
    # flat buffer per this many MiB as they become ready; 0: each gradient on its own.
    fusion_threshold_mb: float = ranged(64.0, low=0, note=" (0: one all-reduce per gradient)")


class HorovodFamily(Strategy):
    """One process per device in a process group; adasum on a power-of-two world."""

    name = "horovod"
    runs_adapters = holds_nf4 = False
    schema = HorovodConfig
    needs_process_group = True
    process_per_device = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0  # optimizer steps, for the bytes per step

    @classmethod
    def check(cls, options: HorovodConfig, topology: Topology, accelerator: str) -> list[str]:
        if options.op == "adasum" and not is_power_of_two(topology.world_size):
            return [
                f"strategy.op=adasum: combines gradients pairwise and needs a power-of-two number of "
                f"ranks; this job has {topology.world_size} (trainer.devices x trainer.num_nodes)"
            ]
        return []
