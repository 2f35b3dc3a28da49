"""Precision: autocast for the forward pass and GradScaler for fp16 (``*-mixed``), or the whole
model, its inputs and its compute in one dtype (``*-true``)."""

from __future__ import annotations

import contextlib

import torch

_DTYPES = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
_TRUE_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64}


class Precision:
    """``precision``: "32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true" or "64-true"
    (Lightning's names)."""

    def __init__(self, precision: str, device: torch.device):
        self.precision = precision
        self.device_type = device.type
        self.dtype = _DTYPES.get(precision)  # autocast's
        # *-true: parameters (and so gradients and optimizer state) and floating inputs in this dtype
        self.input_dtype = _TRUE_DTYPES.get(precision)
        # fp16 gradients underflow without loss scaling; bf16 has fp32's range and needs none.
        self.scaler = torch.amp.GradScaler(device.type) if precision == "16-mixed" else None
        self._null = contextlib.nullcontext()

    def autocast(self):
        if self.dtype is None:
            return self._null
        return torch.autocast(self.device_type, dtype=self.dtype)

    def convert_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The model in the run's dtype (*-true), before the strategy wraps or shards it."""
        return model.to(self.input_dtype) if self.input_dtype is not None else model

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
