"""HSDP: FSDP2 on a 2-D mesh, replicated across ``replicate`` groups and sharded within each."""
from __future__ import annotations

from dataclasses import dataclass

from framework.strategies.fsdp import FSDPConfig, FSDPStrategy


@dataclass
class HSDPConfig(FSDPConfig):
    name: str = "hsdp"
    # -1 = infer from the world size. Both -1: replicate across nodes, shard within a node.
    replicate: int = -1
    shard: int = -1


def mesh_shape(trainer: dict, options: dict) -> tuple[int, int] | str:
    """(replicate, shard) for this world size, or the reason there is none (with every factor)."""
    devices, nodes = trainer.get("devices", 1), trainer.get("num_nodes", 1)
    world = devices * nodes
    replicate, shard = options.get("replicate", -1), options.get("shard", -1)
    if replicate == -1 and shard == -1:
        replicate, shard = (nodes, devices) if nodes > 1 else (1, world)
    elif replicate == -1:
        replicate = world // shard if shard > 0 and world % shard == 0 else -1
    elif shard == -1:
        shard = world // replicate if replicate > 0 and world % replicate == 0 else -1
    if replicate < 1 or shard < 1 or replicate * shard != world:
        return (f"strategy.replicate({options.get('replicate', -1)}) * strategy.shard({options.get('shard', -1)}) "
                f"!= world size {world} (trainer.devices={devices} x trainer.num_nodes={nodes}); "
                f"choose factors whose product is {world}, or -1 to infer one")
    return replicate, shard


class HSDPStrategy(FSDPStrategy):
    name = "hsdp"
    schema = HSDPConfig

    @classmethod
    def check(cls, trainer: dict, options: dict, accelerator: str, problems: list[str]) -> None:
        super().check(trainer, options, accelerator, problems)
        shape = mesh_shape(trainer, options)
        if isinstance(shape, str):
            problems.append(shape)

    def mesh(self):
        from torch.distributed.device_mesh import init_device_mesh

        trainer = {"devices": self.env.local_world_size, "num_nodes": self.env.world_size // self.env.local_world_size}
        return init_device_mesh(self.device.type, mesh_shape(trainer, self.options),
                                mesh_dim_names=("replicate", "shard"))
