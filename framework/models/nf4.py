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


@torch.no_grad()
def quantize_base(model: nn.Module, keep: tuple[str, ...] = ("lm_head", "output")) -> int:
    """Every frozen linear weight of ``model`` (but the heads named ``keep``) in NF4, in place; an
    adapted linear keeps its class and quantizes its base. Returns the weights quantized."""
    from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4

    done = 0
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not isinstance(module, nn.Linear) or name.rpartition(".")[2] in keep or weight.requires_grad:
            continue
        if weight.numel() % BLOCK or is_nf4(weight):
            log.info("QLoRA: %s stays whole (%d weights, not a multiple of %d)", name, weight.numel(), BLOCK)
            continue
        quantized = to_nf4(weight.detach().float(), BLOCK, _scaler_block(weight.numel() // BLOCK))
        module.weight = nn.Parameter(quantized, requires_grad=False)
        if type(module) is nn.Linear:  # (an adapted one, a LoRALinear, dequantizes its base itself)
            module.__class__ = NF4Linear
        done += 1
    return done
