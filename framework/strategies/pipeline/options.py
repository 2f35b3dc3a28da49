"""A pipeline's schedule options, shared by ``strategy=pp`` and ``strategy=parallel``'s ``pp`` degree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from framework.config.ranges import ranged
from framework.strategies.fsdp import FSDPConfig


@dataclass
class ScheduleConfig(FSDPConfig):
    schedule: Literal["gpipe", "1f1b", "interleaved_1f1b"] = "1f1b"  # torch.distributed.pipelining's schedule
    # Micro-batches per batch (null: as many as stages); each rank's batch must divide by it.
    microbatches: Optional[int] = ranged(None, low=1)
    # Module names that begin a new stage, e.g. [layers.2] ([]: equal numbers of blocks per stage).
    split_points: list = field(default_factory=list)
    # Stages each rank runs (interleaved_1f1b: 2 or more, rank r the stages r, r + p, ...).
    stages_per_rank: int = ranged(1, low=1)
