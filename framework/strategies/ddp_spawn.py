"""DDP with ranks started by torch.multiprocessing.spawn (Lightning's ddp_spawn, for notebooks and parity)."""
from __future__ import annotations

from framework.strategies.ddp import DDPStrategy


class DDPSpawnStrategy(DDPStrategy):
    name = "ddp_spawn"
    launcher = "spawn"
