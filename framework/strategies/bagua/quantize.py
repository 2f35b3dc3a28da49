"""8-bit min-max quantisation (Bagua's ByteGrad): each row of a buffer becomes uint8 levels
between its minimum and maximum, plus two floats (the lowest level and the step). The levels
sit on a grid through zero, so an exact zero (a parameter that got no gradient) stays zero:
QAdam divides momenta by the square root of their variance, which is 0 there."""

from __future__ import annotations

import torch


def quantize(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rows [R, C] float -> (levels [R, C] uint8, meta [R, 2] float32: minimum, step)."""
    low, high = rows.min(dim=1).values, rows.max(dim=1).values
    step = torch.where(high > low, (high - low) / 254.0, torch.ones_like(high))
    low = torch.floor(low / step) * step  # on the grid k * step: zero is a level
    levels = torch.round((rows - low[:, None]) / step[:, None]).clamp_(0, 255).to(torch.uint8)
    return levels, torch.stack([low, step], dim=1).float()


def dequantize(levels: torch.Tensor, meta: torch.Tensor) -> torch.Tensor:
    return levels.float() * meta[:, 1:2] + meta[:, 0:1]
