"""Mixed precision: autocast for the forward pass, GradScaler for fp16."""
from __future__ import annotations

import contextlib

import torch

_DTYPES = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


class Precision:
    """``precision``: "32-true", "bf16-mixed" or "16-mixed" (Lightning's names)."""

    def __init__(self, precision: str, device: torch.device):
        self.precision = precision
        self.device_type = device.type
        self.dtype = _DTYPES[precision]
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
        self.scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
        self._null = contextlib.nullcontext()

    def autocast(self):
        if self.dtype is None:
            return self._null
        return torch.autocast(self.device_type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring gradients to their true scale (before clipping)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)  # skips the step when gradients overflowed
            self.scaler.update()
        else:
            optimizer.step()
