"""``strategy.backend=horovod``: the real ``horovod.torch`` (its DistributedOptimizer and
collectives), under ``horovodrun``, for users whose clusters run Horovod.

Horovod moves the gradients; a torch.distributed (gloo/nccl) group, made from Horovod's own
rendezvous, serves everything else the engine does across ranks (checkpoints through
torch.distributed.checkpoint, metric reductions, barriers), as for every other strategy.
Build Horovod with ``scripts/build_horovod.sh``.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from framework.config.environment import RankEnv, free_port

BUILD_HINT = (
    "build it with `bash scripts/build_horovod.sh` from the framework's source repository (Horovod 0.28.1 "
    "for CPU/gloo against torch 2.13.0, into .cache/horovod-venv) and run with that venv's horovodrun and "
    "python, or use strategy.backend=native"
)


def init_horovod(env: RankEnv) -> None:
    """hvd.init(), and MASTER_ADDR / MASTER_PORT for the torch.distributed group: rank 0's host
    (the name horovodrun reached it by) and a port it found free, sent to all through Horovod."""
    import horovod.torch as hvd

    hvd.init()
    if (hvd.rank(), hvd.size()) != (env.rank, env.world_size):
        raise RuntimeError(
            f"horovod: hvd.rank()/size() = {hvd.rank()}/{hvd.size()} but the launcher's variables say "
            f"{env.rank}/{env.world_size}"
        )
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return
    host = os.environ.get("HOROVOD_HOSTNAME", "localhost")
    address = "127.0.0.1" if host in ("localhost", "127.0.0.1") else host
    address, port = hvd.broadcast_object((address, free_port() if env.rank == 0 else 0), root_rank=0)
    os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port))


def distributed_optimizer(
    optimizer: torch.optim.Optimizer, model: nn.Module, op: str, compression: str, backward_passes_per_step: int
) -> torch.optim.Optimizer:
    """hvd.DistributedOptimizer over ``optimizer``, with its state from rank 0 when it has any.

    Empty state (a fresh start) is not broadcast: hvd.broadcast_optimizer_state would first
    take a step on zero gradients to create it, which moves weights under weight decay and
    advances Adam's step count, so the losses would no longer match the native backend."""
    import horovod.torch as hvd

    wrapped = hvd.DistributedOptimizer(
        optimizer,
        named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none,
        backward_passes_per_step=backward_passes_per_step,
        op={"average": hvd.Average, "sum": hvd.Sum, "adasum": hvd.Adasum}[op],
    )
    if wrapped.state:
        hvd.broadcast_optimizer_state(wrapped, root_rank=0)
    wrapped.zero_grad = _zero_grad_of(wrapped, type(optimizer))
    return wrapped


def _zero_grad_of(wrapped: torch.optim.Optimizer, base: type):
    """torch's ``zero_grad(set_to_none)`` signature (the engine and torch.distributed.checkpoint
    pass it; Horovod's takes no argument), with Horovod's check that no all-reduce is in flight."""

    def zero_grad(set_to_none: bool = True) -> None:
        if wrapped._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize()"
            )
        base.zero_grad(wrapped, set_to_none)

    return zero_grad


def broadcast_parameters(model: nn.Module) -> None:
    import horovod.torch as hvd

    hvd.broadcast_parameters(model.state_dict(), root_rank=0)


def shutdown() -> None:
    import horovod.torch as hvd

    hvd.shutdown()
