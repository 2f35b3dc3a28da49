"""Expert parallelism (``strategy.ep``): each mixture-of-experts layer's experts split across the
``ep`` ranks of a group, each rank's tokens sent to the rank that holds their expert and back
(two all-to-alls per layer and pass, GShard's and torchtitan's).

The ranks of an expert-parallel group are data-parallel (they train on different samples): every
rank routes its own tokens, ``GroupedExperts.forward(tokens sorted by expert, counts)`` becomes
``expert_parallel_forward``. The expert weights are DTensors on the strategy's data-parallel mesh
(``(dp_outer, ep)``: replicated across ``dp_outer``, split by expert across ``ep``), left out of
FSDP; their gradients hold the sum over one ep group's tokens, so before the optimizer step they
are summed across ``dp_outer`` and divided by the data-parallel ranks: every rank's batch counted
once, as for the parameters FSDP reduces.

Under tensor parallelism too (``ep x tp``, torchtitan's expert tensor parallelism): the mesh is
``(dp_outer, ep, tp)``, each expert's hidden units split across tp as well. The ranks of a tp group
route the same tokens; each exchanges them within its own ep group (the ranks of its tp index) and
computes its slice of its experts' hidden units: partial outputs, which the tensor-parallel MoE
layer sums across tp as it does without experts split (``models/moe_tensor_parallel.py``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from framework.models.moe import GroupedExperts, expert_outputs


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` of rows: ``send[j]`` rows to rank j, ``receive[i]`` from rank i;
    backward sends the gradients back the same way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, receive: list[int], send: list[int], group) -> torch.Tensor:
        ctx.receive, ctx.send, ctx.group = receive, send, group
        out = x.new_empty(sum(receive), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), receive, send, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        back = grad.new_empty(sum(ctx.send), *grad.shape[1:])
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.receive, group=ctx.group)
        return back, None, None, None


class ExpertParallelExperts(GroupedExperts):
    """GroupedExperts whose weights hold this rank's experts only (``ep_group``: set by the strategy)."""

    ep_group = None

    def forward(self, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
        return expert_parallel_forward(self, tokens, counts)


def expert_parallel_forward(experts: ExpertParallelExperts, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """This rank's ``tokens`` (sorted by global expert, ``counts`` per expert) through experts held
    across the group: the counts exchanged, the tokens sent to their experts' ranks, computed there
    grouped by local expert, and sent back in the order they came."""
    group = experts.ep_group
    ep = dist.get_world_size(group)
    local = len(counts) // ep  # experts per rank: rank j holds [j * local, (j + 1) * local)
    sent = torch.tensor(counts, dtype=torch.long, device=tokens.device).view(ep, local)
    received = torch.empty_like(sent)
    dist.all_to_all_single(received, sent, group=group)  # received[i, l]: rank i's tokens for my expert l
    send, receive = sent.sum(1).tolist(), received.sum(1).tolist()
    arrived = _AllToAll.apply(tokens, receive, send, group)  # by source rank, then local expert
    segment = torch.repeat_interleave(torch.arange(ep * local, device=tokens.device), received.flatten())
    by_expert = ((segment % local) * ep + segment // local).argsort(stable=True)
    out = expert_outputs(arrived[by_expert], received.sum(0).tolist(), *experts.local_weights(tokens.dtype))
    return _AllToAll.apply(out[by_expert.argsort()], send, receive, group)


def grouped_experts(model: nn.Module) -> list[GroupedExperts]:
    return [m for m in model.modules() if isinstance(m, GroupedExperts)]


def expert_parameters(model: nn.Module) -> list:
    """In the model's order, the same on every rank (a set's order is by address: each rank would
    all-reduce another parameter's gradient into this one's)."""
    return [p for m in grouped_experts(model) for p in m.parameters()]


def apply_expert_parallel(model: nn.Module, mesh) -> None:
    """Split every GroupedExperts' weights by expert across the ``ep`` dimension of ``mesh``
    (``(dp_outer, ep)``, replicated across dp_outer; ``(dp_outer, ep, tp)`` after tensor parallelism,
    which split every expert's hidden units across tp) and route their forward through the ep group."""
    for module in grouped_experts(model):
        for name, param in list(module.named_parameters(recurse=False)):
            split = _split_by_expert(param.data, mesh)
            module.register_parameter(name, nn.Parameter(split, requires_grad=param.requires_grad))
        module.__class__ = ExpertParallelExperts
        module.ep_group = mesh["ep"].get_group()


def _split_by_expert(weight: torch.Tensor, mesh):
    """``weight`` ([experts, ...], whole or a tensor-parallel DTensor) as a DTensor of ``mesh`` holding
    this rank's experts; no communication (a meta model's, or one every rank built alike)."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    if not isinstance(weight, DTensor):
        return distribute_tensor(weight, mesh, [Replicate(), Shard(0)], src_data_rank=None)
    ep = mesh["ep"]
    mine = weight.to_local().chunk(ep.size(), dim=0)[ep.get_local_rank()]
    return DTensor.from_local(mine, mesh, [Replicate(), Shard(0), *weight.placements], run_check=False)


@torch.no_grad()
def reduce_expert_gradients(model: nn.Module, outer_group, data_ranks: int) -> None:
    """The experts' gradients: summed over the ep groups (``outer_group``; None: one group) and
    divided by the ``data_ranks`` whose batches they came from."""
    for param in expert_parameters(model):
        if param.grad is None:
            continue
        grad = param.grad.to_local()
        if outer_group is not None:
            dist.all_reduce(grad, group=outer_group)
        grad.div_(data_ranks)
