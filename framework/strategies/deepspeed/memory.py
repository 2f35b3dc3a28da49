"""What a rank of a DeepSpeed run holds of the model state: its parameters (stage 3: its partition),
its gradients (stage 1: whole; 2 and 3: its partition), ZeRO's fp32 master partitions and the
optimizer state over them."""

from __future__ import annotations

import torch

from framework.strategies.deepspeed.state import flat_partitions


def held_bytes(tensors) -> int:
    """The bytes of the storages behind ``tensors``, each once (ZeRO's gradients are views of its buffers)."""
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors if isinstance(t, torch.Tensor)
    }
    return sum(storages.values())


def _tensors(value) -> list:
    """The tensors inside ``value`` (a tensor, or dicts and lists of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else []
    return [t for item in items for t in _tensors(item)]


def gradient_bytes(engine) -> int:
    """The bytes of the gradients this rank holds at the end of a window: the model's own (stage 1:
    whole) and ZeRO's partitions of them (stage 2: what it accumulated, ``all_grad_tensors`` or
    ``averaged_gradients``; stage 3: its flat buffer)."""
    zero = engine.optimizer
    held = [q.grad for q in engine.module.parameters()]
    for name in ("averaged_gradients", "all_grad_tensors", "grads_in_partition", "grad_partitions_flat_buffer"):
        held += _tensors(getattr(zero, name, None))
    return held_bytes(held)


def model_state_bytes(engine, optimizer, gradients: int) -> dict:
    """{'params', 'grads', 'optimizer', 'total'} in bytes on this rank; ``gradients``: what
    ``gradient_bytes`` measured at the end of a window (the step frees them); ZeRO's fp32 master
    partitions count as optimizer state."""
    p = sum(t.numel() * t.element_size() for t in (getattr(q, "ds_tensor", q) for q in engine.module.parameters()))
    o = sum(t.numel() * t.element_size() for t, _ in flat_partitions(engine))
    for state in optimizer.state.values():
        o += sum(v.numel() * v.element_size() for v in state.values() if isinstance(v, torch.Tensor) and v.dim())
    return {"params": p, "grads": gradients, "optimizer": o, "total": p + gradients + o}
