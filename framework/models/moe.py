"""Mixture of experts: the GPT's feed-forward replaced by top-k routed SwiGLU experts (Mixtral's and
DeepSeek's layer: a router, ``n_experts`` experts held as three stacked weights, an optional shared
expert every token passes through).

Each token goes to its ``top_k`` experts by the router's softmax, their outputs weighted by the
renormalised top-k probabilities. ``capacity_factor`` (null: dropless) caps each expert at
``capacity_factor x tokens x top_k / n_experts`` of a rank's tokens; the rest of an over-full
expert's tokens pass through the residual only (Switch Transformer's). The load-balancing loss is
Switch Transformer's, ``n_experts x sum_e f_e x P_e`` (f_e: the share of assignments expert e got,
P_e: its mean router probability); f_e counts the tokens of every rank while training, so the loss
and its gradient are those of the whole global batch whatever the layout.

The experts compute ``GroupedExperts.forward(tokens sorted by expert, count per expert)``: the one
call expert parallelism replaces (it sends each expert's tokens to the rank that holds it).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class FeedForward(nn.Module):
    """The SwiGLU feed-forward (Llama's): ``w2(silu(w1 x) * w3 x)``, the GPT's and a mixture of
    experts' shared expert."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GroupedExperts(nn.Module):
    """``n_experts`` SwiGLU feed-forwards as three stacked weights ([experts, in, out] each)."""

    def __init__(self, dim: int, hidden: int, n_experts: int):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w3 = nn.Parameter(torch.empty(n_experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(n_experts, hidden, dim))

    def forward(self, tokens: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """``tokens`` [n, dim] sorted by expert, ``counts[e]`` of them for expert e: each group
        through its expert, in the same order."""
        return expert_outputs(tokens, counts, *self.local_weights(tokens.dtype))

    def local_weights(self, dtype: torch.dtype) -> tuple:
        """w1, w3, w2 as this rank computes with them (``local_part``: tensor parallel's slice of
        every expert's hidden units, expert parallel's experts of this rank)."""
        return tuple(local_part(p, dtype) for p in (self.w1, self.w3, self.w2))


def local_part(weight, dtype: torch.dtype) -> torch.Tensor:
    """``weight`` whole, or a split one's (DTensor's) local part in the tokens' ``dtype`` (FSDP's mixed
    precision casts the parameters it manages, not the split ones a layer reads itself)."""
    return weight.to_local().to(dtype) if hasattr(weight, "to_local") else weight


def expert_outputs(tokens: torch.Tensor, counts: list[int], w1, w3, w2) -> torch.Tensor:
    """Each expert's group of ``tokens`` (``counts`` of them, in order) through that expert's weights.
    An empty group is computed too: the output stays in the graph, so every rank of an expert-parallel
    group runs the same collectives in backward, whatever its experts received."""
    groups = tokens.split(counts)
    return torch.cat([(F.silu(group @ w1[e]) * (group @ w3[e])) @ w2[e] for e, group in enumerate(groups)])


class Routing(NamedTuple):
    """A forward's assignments, sorted by expert: each one's weight and token, and how many per expert."""

    weights: torch.Tensor
    source: torch.Tensor
    counts: list[int]


class MoE(nn.Module):
    """``forward(x [batch, seq, dim]) -> [batch, seq, dim]``; ``aux_loss``: the last forward's
    load-balancing loss (with its graph), which the task adds to a training step's loss."""

    def __init__(
        self,
        dim: int,
        hidden: int,
        n_experts: int,
        top_k: int,
        shared_expert: bool = False,
        capacity_factor: Optional[float] = None,
    ):
        super().__init__()
        self.n_experts, self.top_k, self.capacity_factor = n_experts, top_k, capacity_factor
        self.router = nn.Linear(dim, n_experts, bias=False)
        self.experts = GroupedExperts(dim, hidden, n_experts)
        self.shared = FeedForward(dim, hidden) if shared_expert else None
        self.aux_loss: Optional[torch.Tensor] = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        routing = self.route(self.router(tokens), x.dtype)
        out = self.combine(tokens, self.experts(tokens[routing.source], routing.counts), routing)
        if self.shared is not None:
            out = out + self.shared(tokens)
        return out.view_as(x)

    def route(self, logits: torch.Tensor, dtype: torch.dtype) -> Routing:
        """Each token's ``top_k`` experts from the router's ``logits``, as sorted assignments (over
        capacity dropped); sets ``aux_loss``."""
        probs = torch.softmax(logits.float(), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(dtype)
        experts = chosen.flatten()
        order = experts.argsort(stable=True)  # assignments grouped by expert, in token order within each
        counts = self._counts(experts)
        self.aux_loss = self._balance_loss(probs, counts)
        source = order // self.top_k  # the token of each sorted assignment
        kept = self._within_capacity(experts[order], counts, len(logits))
        if kept is not None:
            order, source = order[kept], source[kept]
            counts = self._counts(experts[order])
        return Routing(weights.flatten()[order], source, _as_list(counts, len(order)))

    @staticmethod
    def combine(tokens: torch.Tensor, outputs: torch.Tensor, routing: Routing) -> torch.Tensor:
        """Each token's experts' ``outputs`` weighted and summed, in the tokens' order."""
        return torch.zeros_like(tokens).index_add_(0, routing.source, outputs * routing.weights[:, None])

    def _counts(self, experts: torch.Tensor) -> torch.Tensor:
        """Assignments per expert (a meta tensor on the meta device, where framework-plan measures
        activations without data)."""
        if experts.is_meta:
            return torch.zeros(self.n_experts, dtype=torch.long, device="meta")
        return torch.bincount(experts, minlength=self.n_experts)

    def _balance_loss(self, probs: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Switch Transformer's: n_experts x sum_e f_e x P_e, f_e over every rank's tokens while training."""
        counts = counts.float()
        if self.training and dist.is_available() and dist.is_initialized():
            counts = counts.clone()
            dist.all_reduce(counts)  # every rank trains together: one more small collective per layer
        share = counts / counts.sum().clamp(min=1)
        return self.n_experts * (share * probs.mean(dim=0)).sum()

    def _within_capacity(self, sorted_experts: torch.Tensor, counts: torch.Tensor, n_tokens: int):
        """Which sorted assignments fit their expert's capacity (None: dropless)."""
        if self.capacity_factor is None:
            return None
        capacity = math.ceil(self.capacity_factor * n_tokens * self.top_k / self.n_experts)
        starts = torch.cumsum(counts, 0) - counts
        rank_in_expert = torch.arange(len(sorted_experts), device=counts.device) - starts[sorted_experts]
        return rank_in_expert < capacity


def _as_list(counts: torch.Tensor, assignments: int) -> list[int]:
    """``counts`` as ints; on the meta device, routing unknown: the assignments spread evenly."""
    if counts.is_meta:
        share, extra = divmod(assignments, len(counts))
        return [share + (e < extra) for e in range(len(counts))]
    return counts.tolist()
