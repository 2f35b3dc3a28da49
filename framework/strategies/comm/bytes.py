"""What the communicating strategies share: flattening tensors for one collective, and the
bytes a rank sends in each collective (the ring algorithms' counts), for results.json's
``comm.bytes_per_step``."""

from __future__ import annotations

import torch


def allreduce_bytes(nbytes: int, world: int) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, 2 (N-1)/N of the buffer per rank."""
    return 2 * (world - 1) / world * nbytes


def allgather_bytes(nbytes: int, world: int) -> float:
    """All-gather of ``nbytes`` per rank: each rank's piece travels to the N-1 others."""
    return (world - 1) * nbytes


def alltoall_bytes(nbytes: int, world: int) -> float:
    """All-to-all of a buffer split in N pieces: N-1 of them leave."""
    return (world - 1) / world * nbytes


def gradient_allreduce_bytes(model: torch.nn.Module, world: int, element_size: int | None = None) -> float:
    """One ring all-reduce of every trained gradient (in ``element_size``-byte elements when the
    gradients are compressed): what DDP and Horovod send per step, however they bucket it."""
    return float(
        sum(
            allreduce_bytes(p.numel() * (element_size or p.element_size()), world)
            for p in model.parameters()
            if p.requires_grad
        )
    )


def broadcast_model(model: torch.nn.Module) -> None:
    """Every rank starts from rank 0's parameters and buffers (hvd.broadcast_parameters)."""
    import torch.distributed as dist

    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor.data, src=0)


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten_into(buffer: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy ``buffer`` back into ``tensors`` (in order, by their sizes)."""
    offset = 0
    for t in tensors:
        t.copy_(buffer[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
