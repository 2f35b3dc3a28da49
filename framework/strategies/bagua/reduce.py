"""Gradient reductions of Bagua's algorithms, on one flat buffer: the full-precision
all-reduce (flat or hierarchical) and ByteGrad's 8-bit one. Each returns the bytes it sent."""

from __future__ import annotations

import torch
import torch.distributed as dist

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


def quantize(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rows [R, C] float -> (levels [R, C] uint8, meta [R, 2] float32: minimum, step).

    8-bit min-max quantisation (Bagua's ByteGrad): each row of a buffer becomes uint8 levels between its minimum
    and maximum, plus two floats (the lowest level and the step). The levels sit on a grid through zero, so an
    exact zero (a parameter that got no gradient) stays zero: QAdam divides momenta by the square root of their
    variance, which is 0 there."""
    low, high = rows.min(dim=1).values, rows.max(dim=1).values
    step = torch.where(high > low, (high - low) / 254.0, torch.ones_like(high))
    low = torch.floor(low / step) * step  # on the grid k * step: zero is a level
    levels = torch.round((rows - low[:, None]) / step[:, None]).clamp_(0, 255).to(torch.uint8)
    return levels, torch.stack([low, step], dim=1).float()


def dequantize(levels: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    return levels.float() * meta[:, 1:2] + meta[:, 0:1]
