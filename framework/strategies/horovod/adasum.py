"""Adasum (Maleki et al., 2020, "Scaling Distributed Training with Adaptive Summation"): the
adaptive pairwise combination of gradients that Horovod's ``op=Adasum`` applies.

    adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

Orthogonal gradients add up, parallel ones average. N = 2^k ranks combine in a binary tree:
pairs (0,1), (2,3), ... then pairs of pairs, as Horovod's recursive doubling does.
"""

from __future__ import annotations

import torch


def adasum_pair(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Adasum of two gradients of one tensor (computed in float64: the dot products cancel)."""
    a64, b64 = a.double(), b.double()
    dot = torch.dot(a64.flatten(), b64.flatten())
    na, nb = torch.dot(a64.flatten(), a64.flatten()), torch.dot(b64.flatten(), b64.flatten())
    ca = 1 - dot / (2 * na) if na > 0 else torch.ones((), dtype=torch.float64)
    cb = 1 - dot / (2 * nb) if nb > 0 else torch.ones((), dtype=torch.float64)
    return (ca * a64 + cb * b64).to(a.dtype)


def adasum_tree(grads: list[torch.Tensor]) -> torch.Tensor:
    """Adasum of one tensor's gradients from 2^k ranks, in rank order, pair by pair."""
    if len(grads) & (len(grads) - 1):
        raise ValueError(f"Adasum needs a power-of-two number of ranks, got {len(grads)}")
    while len(grads) > 1:
        grads = [adasum_pair(grads[i], grads[i + 1]) for i in range(0, len(grads), 2)]
    return grads[0]


def is_power_of_two(n: int) -> bool:
    return n > 0 and not n & (n - 1)
