"""DDP with ranks started by torch.multiprocessing.spawn (Lightning's ddp_spawn, for notebooks and parity)."""

from __future__ import annotations

from framework.strategies.base import Strategy
from framework.strategies.ddp import DDPWrapping


class DDPSpawnStrategy(DDPWrapping, Strategy):
    name = "ddp_spawn"
    launcher = "spawn"
