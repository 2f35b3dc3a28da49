"""HSDP (``strategy=hsdp``): ``strategy=parallel`` with two data-parallel degrees, FSDP2 replicated
across ``replicate`` groups and sharded within each; its own option names, the one parallelize path."""

from __future__ import annotations

from dataclasses import dataclass

from framework.strategies.fsdp import FSDPConfig
from framework.strategies.parallel import ParallelStrategy


@dataclass
class HSDPConfig(FSDPConfig):
    name: str = "hsdp"
    # -1 = infer from the world size. Both -1: replicate across nodes, shard within a node.
    replicate: int = -1
    shard: int = -1  # ranks per shard group (-1: see replicate)


class HSDPStrategy(ParallelStrategy):
    name = "hsdp"
    schema = HSDPConfig

    @classmethod
    def degrees(cls, devices: int, num_nodes: int, options: HSDPConfig) -> dict[str, int]:
        world = devices * num_nodes
        replicate, shard = options.replicate, options.shard
        if replicate == -1 and shard == -1:
            replicate, shard = (num_nodes, devices) if num_nodes > 1 else (1, world)
        elif replicate == -1:
            replicate = world // shard if shard > 0 and world % shard == 0 else -1
        elif shard == -1:
            shard = world // replicate if replicate > 0 and world % replicate == 0 else -1
        if replicate < 1 or shard < 1 or replicate * shard != world:
            raise ValueError(
                f"strategy.replicate({options.replicate}) * strategy.shard({options.shard}) != world size "
                f"{world} (trainer.devices={devices} x trainer.num_nodes={num_nodes}); choose factors "
                f"whose product is {world}, or -1 to infer one"
            )
        return {"dp_replicate": replicate, "dp_shard": shard}
