"""Collectives over the job's process group, as plain functions: each is a no-op answer for one
process while no group exists (single device), so callers never ask which strategy runs.

``op`` is "sum", "mean" or "max". Every rank must call a collective at the same point, in the
same order, or the job hangs until the process-group timeout (``strategy.timeout_s``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """A process group exists (this process is one rank of a job, or a one-rank group)."""
    return dist.is_available() and dist.is_initialized()


def _reduce_op(op: str):
    return dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM


def all_reduce(tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """Sum, mean or maximum of ``tensor`` over all ranks (in place for sum and max)."""
    if not is_distributed():
        return tensor
    dist.all_reduce(tensor, op=_reduce_op(op))
    return tensor / dist.get_world_size() if op == "mean" else tensor


def all_reduce_async(tensor: torch.Tensor, op: str = "sum"):
    """Start an in-place sum or max of ``tensor`` over all ranks; returns the handle to ``wait()``."""
    return dist.all_reduce(tensor, op=_reduce_op(op), async_op=True)


def all_gather_object(obj) -> list:
    """``obj`` of every rank, in rank order, on every rank (picklable objects)."""
    if not is_distributed():
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_object(obj, dst: int = 0) -> list | None:
    """``obj`` of every rank, in rank order, on rank ``dst`` (None on the others)."""
    if not is_distributed():
        return [obj]
    out = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    dist.gather_object(obj, out, dst=dst)
    return out


def broadcast_object(obj, src: int = 0):
    """Rank ``src``'s ``obj`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if is_distributed():
        dist.barrier()
