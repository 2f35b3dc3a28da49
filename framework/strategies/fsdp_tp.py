"""2-D FSDP x TP (``strategy=fsdp_tp``, Lightning's ModelParallelStrategy): ``strategy=parallel`` with
the degrees named as Lightning names them, TP within each group of ``tensor_parallel`` ranks,
FSDP2 across the groups (HSDP x TP with ``replicate`` > 1); its own option names, the one
parallelize path."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from framework.config.ranges import ranged
from framework.strategies.fsdp import FSDPConfig
from framework.strategies.parallel import ParallelStrategy


@dataclass
class FSDPTPConfig(FSDPConfig):
    name: str = "fsdp_tp"
    # Ranks per tensor-parallel group (the innermost mesh dimension).
    tensor_parallel: int = ranged(2, low=1)
    # HSDP x TP: replicate across this many groups of FSDP shards (1: FSDP x TP).
    replicate: int = ranged(1, low=1)
    sequence_parallel: bool = True  # as strategy=tp's
    plan: Optional[dict] = None  # as strategy=tp's


class FSDPTensorParallelStrategy(ParallelStrategy):
    name = "fsdp_tp"
    schema = FSDPTPConfig

    @classmethod
    def degrees(cls, devices: int, num_nodes: int, options: FSDPTPConfig) -> dict[str, int]:
        world, tp, replicate = devices * num_nodes, options.tensor_parallel, options.replicate
        if tp < 1 or replicate < 1 or world % (tp * replicate):
            raise ValueError(
                f"strategy.replicate({replicate}) x shard(?) x strategy.tensor_parallel({tp}) cannot make "
                f"world size {world} (trainer.devices={devices} x trainer.num_nodes={num_nodes}); choose "
                f"factors whose product divides {world}"
            )
        return {"dp_replicate": replicate, "dp_shard": world // (tp * replicate), "tp": tp}
