"""A mixture of experts under tensor parallelism (``MoETensorParallel``, the GPT's plan for a MoE
layer): every expert's hidden units split across the tensor-parallel group, as a dense SwiGLU's are
(w1 and w3 by columns, w2 by rows), the shared expert likewise, the router replicated.

Each rank of the group routes the same tokens (gathered from sequence parallelism's parts), so all
ranks agree on every assignment, and computes its slice of the hidden units of every expert; the
outputs are partial sums, reduced into the layout between blocks (reduce-scattered along the
sequence, or all-reduced). Gradients: the experts' slices get theirs whole; the gradient into the
tokens is a partial sum like the outputs, reduced on the way back. The router's path must be whole
on every rank (its gradient updates a replicated weight), so the routing weights' gradient, which
the partial outputs make partial, is all-reduced, and the router's share of the tokens' gradient,
whole on every rank, is divided by the group's size before that sum.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle

from framework.models.moe import MoE, local_part

# How each weight splits across the group (dims of the stacked experts, [experts, in, out], and of
# nn.Linear's [out, in]); the router's is replicated.
SPLITS = {
    "experts.w1": Shard(2),
    "experts.w3": Shard(2),
    "experts.w2": Shard(1),
    "shared.w1.weight": Shard(0),
    "shared.w3.weight": Shard(0),
    "shared.w2.weight": Shard(1),
}


class MoETensorParallel(ParallelStyle):
    """The plan's style for a MoE layer; ``between``: the layout of the stream between blocks
    (``Shard(1)`` with sequence parallelism, else ``Replicate()``)."""

    def __init__(self, between) -> None:
        super().__init__()
        self.between = between

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        for name, param in list(module.named_parameters()):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            split = distribute_tensor(param.data, device_mesh, [SPLITS.get(name, Replicate())], src_data_rank=None)
            owner.register_parameter(leaf, nn.Parameter(split, requires_grad=param.requires_grad))
        module.__class__ = TensorParallelMoE
        module.tp_mesh, module.between = device_mesh, self.between
        return module

    @staticmethod
    def split_parameters(module: nn.Module) -> int:
        """How many of the layer's parameters this style splits (framework-plan's memory per rank)."""
        return sum(p.numel() for name, p in module.named_parameters() if name in SPLITS)


class TensorParallelMoE(MoE):
    """A MoE layer whose weights are DTensors on ``tp_mesh`` (set by MoETensorParallel)."""

    tp_mesh = None
    between = None

    def forward(self, x) -> torch.Tensor:
        mesh, group = self.tp_mesh, self.tp_mesh.get_group()
        whole = (
            x.redistribute(mesh, [Replicate()])
            if isinstance(x, DTensor)
            else DTensor.from_local(x, mesh, [Replicate()])
        )
        local = whole.to_local(grad_placements=[Partial()])  # the same tokens on every rank; gradients summed
        tokens = local.reshape(-1, local.shape[-1])
        router_input = _ScaleGrad.apply(tokens, 1.0 / mesh.size())
        routing = self.route(F.linear(router_input, self.router.weight.to_local()), local.dtype)
        routing = routing._replace(weights=_AllReduceGrad.apply(routing.weights, group))
        # each expert's slice of hidden units (with expert parallelism too: the rank's experts, its
        # ep group's tokens sent to them): partial outputs, summed with the rest below
        out = self.combine(tokens, self.experts(tokens[routing.source], routing.counts), routing)
        if self.shared is not None:
            s1, s3, s2 = (local_part(m.weight, tokens.dtype) for m in (self.shared.w1, self.shared.w3, self.shared.w2))
            out = out + F.linear(F.silu(F.linear(tokens, s1)) * F.linear(tokens, s3), s2)
        partial = DTensor.from_local(out.view_as(local), mesh, [Partial()])
        return partial.redistribute(mesh, [self.between]).to_local()


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient times ``scale`` backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class _AllReduceGrad(torch.autograd.Function):
    """Identity forward; the gradient summed over ``group`` backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None
