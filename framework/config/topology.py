"""The job's layout of processes and devices, and the checks on it that run before any process
starts (torchtitan's ``ParallelDims``: every factor is in the message).

A strategy class turns ``trainer.devices`` / ``trainer.num_nodes`` and its options into a
``Topology`` (``Strategy.make_topology``); validation checks it against the launcher, the
machine and the batch size here, and every rank later reads the same object.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.config.environment import RankEnv


@dataclass(frozen=True)
class Topology:
    """``num_nodes`` x ``processes_per_node`` processes, each driving ``devices_per_process``
    devices (DataParallel and ddp2 drive several from one process). The processes form a mesh
    (pipeline, data-parallel replicate, data-parallel shard, tensor-parallel), the pipeline factor
    outermost and the tensor-parallel one innermost: ranks r and r+1 of a ``tensor_parallel``-way
    group hold parts of one model and see the same batch, as do the stages of one pipeline, so the
    data-parallel size excludes both factors. hsdp arranges the data-parallel ranks as
    ``replicate`` groups of ``shard`` ranks."""

    num_nodes: int = 1
    processes_per_node: int = 1
    devices_per_process: int = 1
    replicate: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.processes_per_node

    @property
    def data_parallel_size(self) -> int:
        """How many ways the global batch is split across processes."""
        return self.world_size // (self.tensor_parallel * self.pipeline_parallel)

    @property
    def shard(self) -> int:
        """Data-parallel ranks that shard one replica (hsdp; all of them otherwise)."""
        return self.data_parallel_size // self.replicate

    def data_parallel_rank(self, rank: int) -> int:
        """Which share of the batch the process ``rank`` trains on (its tensor-parallel group's,
        the same in every pipeline stage)."""
        return rank // self.tensor_parallel % self.data_parallel_size

    def describe(self) -> str:
        """Every factor, for messages: 'replicate(1) x shard(2) x tensor_parallel(2) = 4 ranks'."""
        pipeline = f"pipeline({self.pipeline_parallel}) x " if self.pipeline_parallel > 1 else ""
        return (
            f"{pipeline}replicate({self.replicate}) x shard({self.shard}) x tensor_parallel({self.tensor_parallel})"
            f" = {self.world_size} rank(s)"
        )


def launch_problems(topology: Topology, strategy: str, launched: RankEnv | None, spawns: bool) -> list[str]:
    """Does the launcher that started this process (``launched``; None: none) fit ``topology``?"""
    problems = []
    per_node = topology.processes_per_node
    if launched is not None and launched.world_size != topology.world_size:
        problems.append(
            f"trainer.devices / trainer.num_nodes: strategy={strategy} with {per_node} process(es) per "
            f"node x trainer.num_nodes={topology.num_nodes} needs {topology.world_size} processes, but "
            f"the launcher started WORLD_SIZE={launched.world_size}"
        )
    if launched is None and topology.num_nodes > 1:
        problems.append(
            f"trainer.num_nodes: {topology.num_nodes} nodes must each be started by a launcher: "
            f"torchrun --nnodes {topology.num_nodes} --nproc-per-node {per_node} "
            "... -m framework.train ..., or srun under SLURM"
        )
    if launched is not None and spawns:
        problems.append(
            f"strategy={strategy}: starts its own ranks with torch.multiprocessing.spawn; under "
            "torchrun or SLURM use strategy=ddp"
        )
    return problems


def batch_problems(topology: Topology, batch_size) -> list[str]:
    """The global batch must split evenly across the data-parallel ranks."""
    dp = topology.data_parallel_size
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size % dp == 0:
        return []
    tp = f" / tensor_parallel({topology.tensor_parallel})" if topology.tensor_parallel > 1 else ""
    tp += f" / pipeline stages({topology.pipeline_parallel})" if topology.pipeline_parallel > 1 else ""
    return [
        f"datamodule.batch_size: the global batch {batch_size} does not divide across {dp} data-parallel "
        f"ranks ({topology.processes_per_node} per node x trainer.num_nodes={topology.num_nodes}{tp}); "
        f"use a multiple of {dp}"
    ]


def accelerator_problems(accelerator: str, devices: int) -> list[str]:
    """Is the resolved ``accelerator`` here, with ``devices`` devices?"""
    import torch

    if accelerator == "cuda" and not torch.cuda.is_available():
        return ["trainer.accelerator: 'cuda' requested but no CUDA device is available here (valid here: auto, cpu)"]
    if accelerator == "cuda" and devices > torch.cuda.device_count():
        return [f"trainer.devices: {devices} requested but only {torch.cuda.device_count()} CUDA device(s) are visible"]
    if accelerator == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        return ["trainer.accelerator: 'mps' requested but MPS is not available here (valid here: auto, cpu)"]
    return []
