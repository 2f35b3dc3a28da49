"""QLoRA's frozen base (``adapter=qlora``): the model's linear weights stored in 4-bit NormalFloat
(torchao's ``NF4Tensor``, which runs on the CPU too) and dequantized block by block in each forward,
beside adapters in full precision (framework/models/lora.py). The output head and the embeddings stay
whole, as torchtune keeps them; a weight whose size is no multiple of a block stays whole too."""

from __future__ import annotations

import logging

import torch
from torch import nn

log = logging.getLogger(__name__)
BLOCK = 64  # weights per quantization block (QLoRA's)
SCALER_BLOCK = 256  # blocks per second-level scale, at most (fewer for a small weight: a divisor of its blocks)
KEEP = ("lm_head", "output")  # the heads (a Hugging Face model's, the built-in GPT's) stay whole


class NF4Linear(nn.Linear):
    """A frozen ``nn.Linear`` whose weight is an NF4Tensor (made by ``quantize_base``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nf4_linear(x, self.weight, self.bias)


def nf4_linear(x: torch.Tensor, weight, bias) -> torch.Tensor:
    """``x W^T + b`` with W dequantized in ``x``'s dtype (its gradient flows to ``x``, never to W)."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4

    out = linear_nf4(x, weight)
    return out if bias is None else out + bias


def is_nf4(tensor) -> bool:
    return type(tensor).__name__ == "NF4Tensor"


def _scaler_block(blocks: int) -> int:
    """The blocks under one second-level scale: at most SCALER_BLOCK, dividing the weight's blocks, and
    leaving a count of scales that FSDP can split across up to 8 ranks (torchao splits each part of an
    NF4 weight evenly); the same on any world size, so every layout dequantizes the same weights."""
    fits = [d for d in range(1, min(blocks, SCALER_BLOCK) + 1) if blocks % d == 0]
    return max((d for d in fits if (blocks // d) % 8 == 0), default=max(fits))


def base_linears(model: nn.Module, keep: tuple[str, ...] = KEEP) -> dict[str, nn.Linear]:
    """Every ``nn.Linear`` of ``model`` but the heads named ``keep``, by name: those whose weights QLoRA
    quantizes, once frozen, where they divide into blocks of BLOCK (a model on any device, meta too)."""
    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rpartition(".")[2] not in keep
    }


def quantized_sizes(model: nn.Module) -> list[int]:
    """The size (weights) of each linear weight QLoRA keeps in NF4 (``model`` with its adapters or
    without: under adapters every base weight is frozen)."""
    sizes = (module.weight.numel() for module in base_linears(model).values())
    return [n for n in sizes if n % BLOCK == 0]


def nf4_bytes(weights: int) -> int:
    """The bytes an NF4 weight of ``weights`` values holds, as torchao lays it out: 4 bits a value, an
    int8 scale per block of BLOCK, an fp32 factor per group of scales (``_scaler_block``), the fp32 mean
    of the scales and the 16 fp32 code values."""
    blocks = weights // BLOCK
    return weights // 2 + blocks + 4 * (blocks // _scaler_block(blocks)) + 4 + 16 * 4


def bytes_saved(model: nn.Module) -> int:
    """The bytes QLoRA's NF4 base holds fewer than the same weights in fp32 (4 B a weight): what the
    memory plan, the size check and results.json's prediction take off a model counted at 4 B a weight."""
    return sum(4 * n - nf4_bytes(n) for n in quantized_sizes(model))


def set_nf4(module: nn.Linear, weight: torch.Tensor) -> None:
    """``module``'s weight the NF4 of ``weight`` (fp32, its whole value), frozen; a plain ``nn.Linear``
    becomes an NF4Linear (an adapted one, a LoRALinear, dequantizes its base itself)."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

    quantized = to_nf4(weight, BLOCK, _scaler_block(weight.numel() // BLOCK))
    module.weight = nn.Parameter(quantized, requires_grad=False)
    if type(module) is nn.Linear:
        module.__class__ = NF4Linear


@torch.no_grad()
def quantize_base(model: nn.Module, keep: tuple[str, ...] = KEEP) -> int:
    """Every frozen linear weight of ``model`` (but the heads named ``keep``) in NF4, in place; an
    adapted linear keeps its class and quantizes its base. Returns the weights quantized."""
    done = 0
    for name, module in base_linears(model, keep).items():
        weight = module.weight
        if weight.requires_grad:
            continue
        if weight.numel() % BLOCK or is_nf4(weight):
            log.info("QLoRA: %s stays whole (%d weights, not a multiple of %d)", name, weight.numel(), BLOCK)
            continue
        set_nf4(module, weight.detach().float())
        done += 1
    return done
