"""The one place that turns the user's plain model into the model a rank trains, in this order:

1. activation checkpointing (training only): the named submodule classes recompute their
   activations in backward; a class swap, so parameter names stay the model's own;
2. ``torch.compile`` (training only, ``trainer.compile``: the model or each block), in place: names
   unchanged again;
3. precision: the whole model in a ``*-true`` dtype (``*-mixed`` is autocast at run time);
4. the strategy: moved to the rank's device, wrapped or sharded (``parallelize``), and the
   optimizer built over what it wrapped (FSDP's sharded parameters, say).

Names must survive 1-3 because the strategy's wrapping and every checkpoint go by them.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional

from torch import nn

log = logging.getLogger(__name__)


def prepare_model(
    model: nn.Module, config, precision, strategy, optimizer_factory: Optional[Callable] = None, training: bool = True
) -> tuple[nn.Module, object]:
    """(the model ready to run on this rank, its optimizer or None without ``optimizer_factory``)."""
    if training and config.activation_checkpointing:
        from framework.engine.activation_checkpointing import apply_activation_checkpointing

        names = apply_activation_checkpointing(model, config.activation_checkpointing)
        if strategy.is_global_zero:
            log.info(
                "Activation checkpointing: %d submodules recompute in backward (%s)",
                len(names),
                _some(names),
            )
    if training and config.compile:
        from framework.engine.compiling import compile_model

        compiled = compile_model(model, config.compile)  # in place: parameter names stay the same
        if strategy.is_global_zero and config.compile == "blocks":
            log.info("Compiling %d blocks (%s)", len(compiled), _some(compiled))
    return strategy.setup(precision.convert_module(model), optimizer_factory)


def _some(names: list[str]) -> str:
    """The first few of many module names, for a log line."""
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
