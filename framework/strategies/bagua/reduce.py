"""Gradient reductions of Bagua's algorithms, on one flat buffer: the full-precision
all-reduce (flat or hierarchical) and ByteGrad's 8-bit one. Each returns the bytes it sent."""

from __future__ import annotations

import torch
import torch.distributed as dist

from framework.strategies.bagua.quantize import dequantize, quantize
from framework.strategies.comm.bytes import allgather_bytes, allreduce_bytes, alltoall_bytes


def allreduce_average(buffer: torch.Tensor, world: int) -> float:
    buffer.div_(world)
    dist.all_reduce(buffer)
    return allreduce_bytes(buffer.numel() * buffer.element_size(), world)


def hierarchical_average(buffer: torch.Tensor, world: int, groups) -> float:
    """Reduce within the node to its first rank, all-reduce across the nodes' first ranks,
    broadcast within the node: the slow inter-node link carries one buffer per node."""
    intra, inter, root, is_root, local = groups
    nbytes = buffer.numel() * buffer.element_size()
    buffer.div_(world)
    dist.reduce(buffer, dst=root, group=intra)
    sent = nbytes if not is_root else 0
    if is_root:
        dist.all_reduce(buffer, group=inter)
        sent += allreduce_bytes(nbytes, dist.get_world_size(inter))
    dist.broadcast(buffer, src=root, group=intra)
    return sent + (nbytes * (local - 1) if is_root else 0)


def bytegrad_average(buffer: torch.Tensor, world: int, row: int = 1024) -> float:
    """ByteGrad: split in N parts (rank r reduces part r), quantise each ``row`` values to 8 bits
    with their own minimum and step, all-to-all, average, quantise again, all-gather: about 1/4
    of the bytes of an fp32 all-reduce (plus 8 bytes per row)."""
    n = buffer.numel()
    rows_per_part = -(-n // (world * row))
    padded = torch.zeros(world * rows_per_part * row, dtype=torch.float32)
    padded[:n] = buffer.float()
    levels, meta = quantize(padded.view(world * rows_per_part, row))
    got_levels, got_meta = torch.empty_like(levels), torch.empty_like(meta)
    dist.all_to_all_single(got_levels, levels)
    dist.all_to_all_single(got_meta, meta)
    mine = dequantize(got_levels, got_meta).view(world, rows_per_part, row).mean(dim=0)
    levels, meta = quantize(mine)
    all_levels = [torch.empty_like(levels) for _ in range(world)]
    all_meta = [torch.empty_like(meta) for _ in range(world)]
    dist.all_gather(all_levels, levels)
    dist.all_gather(all_meta, meta)
    buffer.copy_(dequantize(torch.cat(all_levels), torch.cat(all_meta)).reshape(-1)[:n].to(buffer.dtype))
    part = rows_per_part * (row + 8)  # one rank's part: levels and each row's two floats
    return alltoall_bytes(world * part, world) + allgather_bytes(part, world)
