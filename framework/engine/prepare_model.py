"""The one place that turns the user's plain model into the model a rank trains, in this order:

1. precision: the whole model in a ``*-true`` dtype (``*-mixed`` is autocast at run time);
2. the strategy (``Strategy.setup``): moved to the rank's device, its layers split (tensor,
   context, expert parallel), then made ready (training only, in place: ``ready_for_training``'s
   activation checkpointing and ``torch.compile``), then wrapped or sharded (FSDP2, DDP), and the
   optimizer built over what it wrapped (FSDP's sharded parameters, say). A strategy that splits
   no layers makes the model ready first, then wraps it.

Activation checkpointing is a class swap and compile replaces forwards in place, so parameter names
stay the model's own: the strategy's wrapping and every checkpoint go by them.
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
    ready = ready_for_training(config, strategy.is_global_zero) if training else None
    return strategy.setup(precision.convert_module(model), optimizer_factory, ready)


def ready_for_training(config, logs: bool) -> Callable[[nn.Module], None]:
    """What makes a (split, not yet wrapped) model ready to train, in place: activation checkpointing
    of the named submodule classes (they recompute their activations in backward), then
    ``trainer.compile`` (the model or each block)."""

    def ready(model: nn.Module) -> None:
        if config.activation_checkpointing:
            from framework.engine.activation_checkpointing import apply_activation_checkpointing

            names = apply_activation_checkpointing(model, config.activation_checkpointing)
            if logs:
                log.info("Activation checkpointing: %d submodules recompute in backward (%s)", len(names), _some(names))
        if config.compile:
            from framework.engine.compiling import compile_model

            compiled = compile_model(model, config.compile)  # in place: parameter names stay the same
            if logs and config.compile == "blocks":
                log.info("Compiling %d blocks (%s)", len(compiled), _some(compiled))

    return ready


def _some(names: list[str]) -> str:
    """The first few of many module names, for a log line."""
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
