"""DDP with ranks started by torch.multiprocessing.spawn (Lightning's ddp_spawn, for notebooks and parity)."""
from __future__ import annotations

from dataclasses import dataclass

from framework.strategies.ddp import DDPConfig, DDPStrategy


@dataclass
class DDPSpawnConfig(DDPConfig):
    name: str = "ddp_spawn"


class DDPSpawnStrategy(DDPStrategy):
    name = "ddp_spawn"
    schema = DDPSpawnConfig
    launcher = "spawn"
