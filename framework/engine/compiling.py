"""``trainer.compile``: torch.compile in place, so that parameter names (and so the strategy's
wrapping and every checkpoint) stay the model's own: the whole model (``true``), or each of its
blocks (``blocks``), torchtitan's way, which keeps working when a strategy splits the model into
FSDP units, tensor-parallel layers or pipeline stages around them."""

from __future__ import annotations

import torch
from torch import nn


def block_classes(model: nn.Module) -> list[str]:
    """The class names of the model's repeated blocks: its ``block_classes`` (names or the classes
    themselves), else the classes it declares unsplittable for FSDP (a Hugging Face model's
    ``_no_split_modules``)."""
    declared = getattr(model, "block_classes", None) or getattr(model, "fsdp_wrap_classes", None) or []
    return [c if isinstance(c, str) else getattr(c, "__name__", str(c)) for c in declared]


def model_blocks(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's blocks, by name: its submodules of one of its ``block_classes``."""
    classes = block_classes(model)
    return [(name, module) for name, module in model.named_modules() if type(module).__name__ in classes]


def blocks_problem(model: nn.Module) -> str | None:
    """Why ``trainer.compile=blocks`` finds nothing to compile in ``model`` (None: it finds blocks)."""
    if model_blocks(model):
        return None
    classes = block_classes(model)
    return (
        f"trainer.compile=blocks: {type(model).__name__} declares no blocks (give it a block_classes "
        f'attribute naming its layer class, block_classes = ("MyBlock",)'
        f"{f'; none of {classes} is a class of its submodules' if classes else ''}); "
        "trainer.compile=true compiles the whole model"
    )


def compile_model(model: nn.Module, how) -> list[str]:
    """Compile ``model`` as ``trainer.compile`` says (true or "blocks"); the names of the modules compiled."""
    if how is True:
        model.compile()
        return [""]
    blocks = model_blocks(model)
    if not blocks:
        raise ValueError(blocks_problem(model))
    for _, module in blocks:
        # the block's forward, not its __call__: the hooks strategies put on a block (FSDP's
        # all-gather, tensor parallelism's redistributions) stay outside the compiled code
        module.forward = torch.compile(module.forward)
    return [name for name, _ in blocks]
