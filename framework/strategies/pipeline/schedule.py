"""A pipeline's schedule: its options (``strategy=pp``'s and ``strategy=parallel``'s ``pp`` degree)
and what it does with a batch: how many micro-batches, how many of them a stage holds at once, and
the share of each step a stage idles (the bubble). The strategy, its checks and framework-plan
share these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from framework.config.ranges import ranged
from framework.config.topology import Topology
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


def bubble_fraction(ranks: int, microbatches: int, stages_per_rank: int = 1) -> float:
    """The share of a step each rank idles, GPipe's and 1F1B's alike: (p - 1) / (m + p - 1) for p
    ranks and m micro-batches; interleaved over v stages per rank, (p - 1) / (v·m + p - 1)."""
    return (ranks - 1) / (stages_per_rank * microbatches + ranks - 1)


def microbatches_in_flight(schedule: str, stages: int, microbatches: int) -> int:
    """Micro-batches whose activations the first (busiest) stage holds at once: all of them under
    GPipe (every forward before any backward), at most one per stage under 1F1B (and counted as
    1F1B's for interleaved 1F1B)."""
    return microbatches if schedule == "gpipe" else min(microbatches, stages)


def microbatches_per_batch(options, topology: Topology) -> int:
    """Micro-batches per batch: strategy.microbatches, else one per rank of the pipeline."""
    return options.microbatches or topology.pp
