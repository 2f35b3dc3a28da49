"""The job's layout of processes and devices, and the checks on it that run before any process
starts (torchtitan's ``ParallelDims``: every factor is in the message).

A strategy class turns ``trainer.devices`` / ``trainer.num_nodes`` and its options into a
``Topology`` (``Strategy.make_topology``); validation checks it against the launcher, the
machine and the batch size here, and every rank later reads the same object.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.config.environment import RankEnv, available_cores

# The mesh's dimensions, outermost first (torchtitan's names and order): the stages of one pipeline
# are farthest apart, a tensor-parallel group's ranks are neighbours (r, r + 1, ...), a context-parallel
# group's next to them (they exchange keys and values in every attention layer).
# An expert-parallel group's ranks are data-parallel ones (each routes its own tokens): inside dp_shard.
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "ep", "cp", "tp")


@dataclass(frozen=True)
class Topology:
    """``num_nodes`` x ``processes_per_node`` processes, each driving ``devices_per_process``
    devices (DataParallel and ddp2 drive several from one process). The processes form one mesh
    of parallel degrees, ``pp x dp_replicate x dp_shard x ep x cp x tp`` = the world size: ranks of one
    ``tp`` group hold parts of one model and see the same batch, as do the stages of one
    pipeline, and the ranks of one ``cp`` group see the same samples, each a part of their
    sequence, so the data-parallel size excludes all three; hsdp arranges the data-parallel ranks
    as ``dp_replicate`` groups of ``dp_shard x ep`` ranks (an ``ep`` group's ranks train on different
    samples and hold different experts). ``dp_shard`` is what the others leave."""

    num_nodes: int = 1
    processes_per_node: int = 1
    devices_per_process: int = 1
    dp_replicate: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.processes_per_node

    @property
    def devices_per_node(self) -> int:
        """The devices a node's processes drive together (``trainer.devices``)."""
        return self.processes_per_node * self.devices_per_process

    @property
    def data_parallel_size(self) -> int:
        """How many ways the global batch is split across processes."""
        return self.world_size // (self.tp * self.pp * self.cp)

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks that shard one replica (hsdp; all of them otherwise), beside the
        expert-parallel ones."""
        return self.data_parallel_size // (self.dp_replicate * self.ep)

    @property
    def degrees(self) -> dict[str, int]:
        """Every degree by its mesh name, outermost first."""
        return {name: getattr(self, name) for name in MESH_ORDER}

    def data_parallel_rank(self, rank: int) -> int:
        """Which share of the batch the process ``rank`` trains on (its tensor- and context-parallel
        groups', the same in every pipeline stage)."""
        return rank // (self.tp * self.cp) % self.data_parallel_size

    def describe(self) -> str:
        """Every degree, for messages: 'pp(1) x dp_replicate(1) x dp_shard(2) x ep(1) x cp(1) x tp(2) = 4 rank(s)'."""
        factors = " x ".join(f"{name}({degree})" for name, degree in self.degrees.items())
        return f"{factors} = {self.world_size} rank(s)"

    @property
    def dp_dims(self) -> tuple[str, ...]:
        """The mesh dimensions FSDP shards over: (dp_replicate, dp_shard) is HSDP, dp_shard alone FSDP."""
        return ("dp_replicate", "dp_shard") if self.dp_replicate > 1 else ("dp_shard",)

    def build_mesh(self, device_type: str, *needed: str):
        """The job's one device mesh: a dimension for each degree above 1 and for each ``needed``
        one (a strategy's own, of size 1 where the others take every rank; FSDP's is dp_shard, which
        ``dp_dims`` always names). Strategies take their sub-meshes by name (``mesh["tp"]``,
        ``mesh[topology.dp_dims]``); every process calls this."""
        from torch.distributed.device_mesh import init_device_mesh

        unknown = set(needed) - set(MESH_ORDER)
        if unknown:
            raise ValueError(f"mesh dimensions {sorted(unknown)}: valid ones are {', '.join(MESH_ORDER)}")
        dims = {name: degree for name, degree in self.degrees.items() if degree > 1 or name in needed}
        return init_device_mesh(device_type, tuple(dims.values()), mesh_dim_names=tuple(dims))

    def launch_problems(self, strategy: str, launched: RankEnv | None, spawns: bool) -> list[str]:
        """Does the launcher that started this process (``launched``; None: none) fit this layout?"""
        problems = []
        per_node = self.processes_per_node
        if launched is not None and launched.world_size != self.world_size:
            problems.append(
                f"trainer.devices / trainer.num_nodes: strategy={strategy} with {per_node} process(es) per "
                f"node x trainer.num_nodes={self.num_nodes} needs {self.world_size} processes, but "
                f"the launcher started WORLD_SIZE={launched.world_size}"
            )
        if launched is None and self.num_nodes > 1:
            problems.append(
                f"trainer.num_nodes: {self.num_nodes} nodes must each be started by a launcher: "
                f"torchrun --nnodes {self.num_nodes} --nproc-per-node {per_node} "
                "... -m framework.train ..., or srun under SLURM"
            )
        if launched is not None and spawns:
            problems.append(
                f"strategy={strategy}: starts its own ranks with torch.multiprocessing.spawn; under "
                "torchrun or SLURM use strategy=ddp"
            )
        return problems

    def batch_problems(self, batch_size) -> list[str]:
        """The global batch must split evenly across the data-parallel ranks."""
        dp = self.data_parallel_size
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size % dp == 0:
            return []
        tp = f" / tp({self.tp})" if self.tp > 1 else ""
        tp += f" / pipeline stages({self.pp})" if self.pp > 1 else ""
        tp += f" / context_parallel({self.cp})" if self.cp > 1 else ""
        return [
            f"datamodule.batch_size: the global batch {batch_size} does not divide across {dp} data-parallel "
            f"ranks ({self.processes_per_node} per node x trainer.num_nodes={self.num_nodes}{tp}); "
            f"use a multiple of {dp}"
        ]

    def accelerator_problems(self, accelerator: str) -> list[str]:
        """Is the resolved ``accelerator`` here, with this layout's devices on each node?"""
        import torch

        devices = self.devices_per_node
        if accelerator == "cuda" and not torch.cuda.is_available():
            return [
                "trainer.accelerator: 'cuda' requested but no CUDA device is available here (valid here: auto, cpu)"
            ]
        if accelerator == "cuda" and devices > torch.cuda.device_count():
            return [
                f"trainer.devices: {devices} requested but only {torch.cuda.device_count()} CUDA device(s) are visible"
            ]
        if accelerator == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            return ["trainer.accelerator: 'mps' requested but MPS is not available here (valid here: auto, cpu)"]
        return []

    def core_problems(self, accelerator: str, oversubscribe: bool) -> list[str]:
        """CPU ranks beyond the cores: each would wait for the others' turns at every collective."""
        cores = available_cores()
        if accelerator != "cpu" or self.processes_per_node <= cores or oversubscribe:
            return []
        return [
            f"trainer.devices: {self.processes_per_node} processes per node on the CPU, but this process may run "
            f"on {cores} core(s); use trainer.devices={cores} or fewer, or set trainer.oversubscribe=true to run "
            f"them anyway"
        ]
