"""Attention that keeps packed documents apart (``datamodule.document_boundaries``): from each
token's position in its document (0 where a document starts), the mask that lets a token attend to
the earlier tokens of its own document only."""

from __future__ import annotations

import torch


def document_mask(positions: torch.Tensor) -> torch.Tensor:
    """[batch, 1, seq, seq], True where query i may attend to key j: j <= i, in the same document."""
    document = (positions == 0).cumsum(dim=1)
    same = document[:, :, None] == document[:, None, :]
    seq = positions.shape[1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=positions.device).tril()
    return (same & causal)[:, None]


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The boolean mask as one added to attention scores (0 or the dtype's lowest), which every
    attention implementation of transformers takes."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
