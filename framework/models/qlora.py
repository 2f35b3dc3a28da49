"""QLoRA's build that never holds the fp32 base whole (``adapter=qlora``, framework/rank/build.py): a
model built on the meta device with its adapters, made real one parameter at a time from the weights
it gives by name (its ``parameter_source``: a Hugging Face model's saved tensors, the built-in GPT's
draws), each linear weight of the base quantized to NF4 as it is read (framework/models/nf4.py)."""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import nn

from framework.models.lora import LoRALinear, init_adapter, is_adapter
from framework.models.nf4 import BLOCK, base_linears, set_nf4


@torch.no_grad()
def materialize_quantized(model: nn.Module, seed: int, device: str = "cpu") -> int:
    """QLoRA's build that never holds the fp32 base whole: ``model``, built on the meta device with its
    adapters (``inject_adapters``), made real on ``device`` one parameter at a time from its
    ``parameter_source(seed)`` (a model whose buffers are real already). Each linear weight that
    ``quantize_base`` quantizes is read (or drawn) into a temporary fp32 tensor and kept in NF4 alone;
    every other parameter is what ``init_weights`` gives it, the adapters what ``init_adapters`` draws:
    the values of the model built whole and then quantized, bit for bit. Returns the weights quantized."""
    source, made, quantized = model.parameter_source(seed), {}, 0
    linears = base_linears(model).items()
    nf4 = {name for name, m in linears if not m.weight.requires_grad and m.weight.numel() % BLOCK == 0}
    for module_name, module in model.named_modules():
        base = None
        for leaf, param in list(module.named_parameters(recurse=False)):
            name = f"{module_name}.{leaf}" if module_name else leaf
            if is_adapter(name):
                setattr(module, leaf, nn.Parameter(torch.empty_like(param, device=device), requires_grad=True))
            elif id(param) in made:  # (a tied weight: the module that came first made it)
                setattr(module, leaf, made[id(param)])
            elif module_name in nf4 and leaf == "weight":
                base = source(name, param.shape).to(device)
                set_nf4(module, base)
                _give_back_freed()
                quantized += 1
            else:
                value = source(name, param.shape).to(device, param.dtype)
                made[id(param)] = nn.Parameter(value, requires_grad=param.requires_grad)
                setattr(module, leaf, made[id(param)])
        if isinstance(module, LoRALinear):
            init_adapter(module_name, module, seed, base)
    if any(t.is_meta for t in model.buffers()):
        raise ValueError(f"{type(model).__name__}: parameter_source makes its parameters, not its buffers (on meta)")
    return quantized


@functools.cache
def _malloc_trim():
    return getattr(ctypes.CDLL(None), "malloc_trim", None)  # (glibc's; None elsewhere)


def _give_back_freed() -> None:
    """The C heap's free pages returned to the system. Quantizing a weight allocates and frees several
    temporaries its size, between the small tensors each one keeps: glibc's heap kept the holes resident,
    600 MiB of them over SmolLM2-135M's 210 weights (the peak 1.6 GiB, not 1.1)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
