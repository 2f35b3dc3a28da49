"""Context parallelism (``strategy.cp``): the ranks of a context-parallel group see the same samples,
each a contiguous part of every sequence, so activations per rank shrink with the degree.

Attention is the one layer that needs the whole sequence. Here it takes the all-gather form Llama 3
was trained with (torch's ``context_parallel`` rings keys and values through CUDA-only attention
kernels; this form runs on any device and backend): every ``scaled_dot_product_attention`` call in
the step gathers the group's keys and values, each rank attends from its own queries to all of
them, causal by position, and backward sums the gathered keys' and values' gradients back to the
rank that holds them. Exact, not approximate: the same attention as one device's.

A model opts in by naming its tables indexed by position (``context_parallel_buffers``, the
built-in GPT's rotary cos and sin): within a step each starts at the rank's first position, as
torchtitan shards its ``freqs_cis``.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode


class _GatherSequence(torch.autograd.Function):
    """All-gather along ``dim`` over ``group``; backward: the sum of every rank's gradient of the
    gathered tensor, this rank's part of it (all-reduce: gloo has no reduce-scatter)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group, dim: int) -> torch.Tensor:
        ctx.group, ctx.dim = group, dim
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        part = grad.chunk(dist.get_world_size(ctx.group), dim=ctx.dim)[dist.get_rank(ctx.group)]
        return part, None, None


def gathered_attention(group, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
    """``scaled_dot_product_attention`` of this rank's queries ([..., local, head_dim], the rank's
    part of the sequence) against the keys and values of the whole sequence."""
    if attn_mask is not None:
        raise ValueError(
            "strategy.cp: context parallelism runs causal (or unmasked) attention; this model passed a mask "
            "of its own (datamodule.document_boundaries?)"
        )
    both = _GatherSequence.apply(torch.stack([key, value]), group, key.dim() - 1)  # one collective for both
    key, value = both[0], both[1]
    mask = None
    if is_causal:
        local = query.shape[-2]
        first = dist.get_rank(group) * local
        rows = torch.arange(first, first + local, device=query.device)
        mask = torch.arange(key.shape[-2], device=query.device)[None, :] <= rows[:, None]
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask, dropout_p=dropout_p, **kwargs)


class _GatheredAttention(TorchFunctionMode):
    """Within it, every ``scaled_dot_product_attention`` call is ``gathered_attention`` (a torch
    function mode is off while its own handler runs: the inner call is torch's)."""

    def __init__(self, group):
        super().__init__()
        self.group = group

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is F.scaled_dot_product_attention:
            return gathered_attention(self.group, *args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def local_sequence(batch, rank: int, size: int):
    """This rank's part of each sequence: every tensor of ``batch`` with a sequence dimension
    ([batch, sequence, ...]) split along it into ``size`` contiguous parts."""
    if isinstance(batch, torch.Tensor):
        return batch.chunk(size, dim=1)[rank] if batch.dim() >= 2 else batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(local_sequence(item, rank, size) for item in batch)
    return batch


@contextlib.contextmanager
def context_parallel(model: nn.Module, batch, group):
    """One step's forward and backward on this rank's part of the sequences of ``batch``: yields
    that part; the model's position tables start at its first position meanwhile."""
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    local = local_sequence(batch, rank, size)
    first = rank * _sequence_length(local)
    tables = [(module, name) for module, name in position_tables(model)]
    saved = [module._buffers[name] for module, name in tables]
    try:
        for (module, name), full in zip(tables, saved):
            module._buffers[name] = full[first:]
        with _GatheredAttention(group):
            yield local
    finally:
        for (module, name), full in zip(tables, saved):
            module._buffers[name] = full


def position_tables(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """(module, buffer name) of every table the model declares indexed by position (dim 0)."""
    names = getattr(model, "context_parallel_buffers", ())
    return [(model.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]) for name in names]


def _sequence_length(batch) -> int:
    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    return first.shape[1]
