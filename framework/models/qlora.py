"""QLoRA's build that never holds the fp32 base whole (``adapter=qlora``, framework/rank/build.py): a
model built on the meta device with its adapters, made real one parameter at a time from the weights
it gives by name (its ``parameter_source``: a Hugging Face model's saved tensors, the built-in GPT's
draws), each linear weight of the base quantized to NF4 as it is read (framework/models/nf4.py)."""

from __future__ import annotations

import ctypes

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


MAPPED_BYTES = 1 << 20  # an allocation this large or larger is mapped apart, and unmapped when freed


def map_large_temporaries() -> None:
    """For the rest of the process, glibc's malloc maps every allocation of MAPPED_BYTES or more apart
    and gives it back when it is freed (``mallopt(M_MMAP_THRESHOLD)``). Its default threshold rises to
    the size of the largest block freed, so the temporaries of NF4 (several of each weight's size,
    when it is quantized and in every forward and backward that dequantizes it) came from its heap,
    in holes between the tensors that live on: SmolLM2-135M's QLoRA peaked at 1,506 MiB after 8 steps
    on the CPU (LoRA: 1,546), with it 1,198 MiB, and its steps took no longer."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # (glibc's; None where the C library has none)
    if mallopt is not None:
        mallopt(-3, MAPPED_BYTES)  # (M_MMAP_THRESHOLD)
