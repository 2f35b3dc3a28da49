"""Model-state memory: the bytes of parameters, gradients and optimizer state held by this rank."""

from __future__ import annotations

import torch

# Optimizer state per parameter in fp32 (bytes): Adam's two moments, SGD's momentum buffer.
STATE_BYTES = {"Adam": 8, "AdamW": 8, "SGD": 4}


def optimizer_state_bytes(optimizer: dict) -> int:
    """Bytes of optimizer state per parameter (fp32) for the ``optimizer`` config node
    (unknown optimizers are assumed to keep two moments, as Adam; none, optimizer=none: 0)."""
    if not optimizer:
        return 0
    name = str(optimizer["_target_"]).rsplit(".", 1)[-1]
    if name == "SGD" and not optimizer.get("momentum"):
        return 0
    return STATE_BYTES.get(name, 8)


def whole_numel(p: torch.Tensor) -> int:
    """A parameter's whole size: a DTensor's numel is global already; DeepSpeed's stage 3 leaves an
    empty tensor in a parameter's place and its size in ``ds_numel``."""
    return getattr(p, "ds_numel", None) or p.numel()


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t  # a DTensor's shard on this rank


def held_bytes(t: torch.Tensor) -> int:
    """The bytes ``t`` holds: a tensor subclass that packs its values (torchao's NF4Tensor: 4 bits a
    weight, with its scales) the sum of its inner tensors' (``__tensor_flatten__``), not numel x its
    dtype's size (4 B a weight for NF4); a plain tensor numel x element size."""
    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is None:
        return t.numel() * t.element_size()
    names, _ = flatten()
    return sum(held_bytes(getattr(t, name)) for name in names)


def model_state_bytes(model: torch.nn.Module, optimizer) -> dict:
    """{'params', 'grads', 'optimizer', 'total'} in bytes on this rank (sharded tensors: the local shard; packed
    ones, QLoRA's NF4 weights, what they hold: ``held_bytes``).

    Counted after a step, when gradients and optimizer state exist; DDP's communication
    buckets are not model state and are not counted.
    """
    params = list(model.parameters())
    p = sum(held_bytes(_local(x)) for x in params)
    g = sum(_local(x.grad).numel() * x.grad.element_size() for x in params if x.grad is not None)
    o = 0  # (``optimizer``: the strategy's inner_optimizer, which holds this rank's state)
    for state in optimizer.state.values() if optimizer is not None else ():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                o += _local(value).numel() * value.element_size()
    return {"params": p, "grads": g, "optimizer": o, "total": p + g + o}
