"""Transfer learning: start a model from another run's weights, reset or freeze parts of it."""

from __future__ import annotations

import logging
from pathlib import Path

from torch import nn

from framework.engine.checkpoint import load_model_weights

log = logging.getLogger(__name__)


def _submodule(model: nn.Module, name: str, key: str) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        valid = [n for n, _ in model.named_children()]
        raise ValueError(
            f"{key}: the model has no submodule {name!r} (top-level submodules: {', '.join(valid)})"
        ) from None


def apply_init(
    model: nn.Module,
    weights: str | None,
    strict: bool = False,
    reset: list = (),
    freeze: list = (),
    trust: bool = False,
) -> dict:
    """Load ``weights`` (a checkpoint directory or a state_dict file) into the plain ``model``
    before any strategy wraps it; tensors of the ``reset`` submodules keep their fresh
    initialisation (a new classifier head); ``freeze`` submodules stop training.

    With ``strict=False`` tensors load when name and shape match; the others are reported.
    Returns the report: loaded / missing / unexpected / mismatched names and frozen parameter count.
    """
    report: dict = {}
    if weights:
        # Everything a reset submodule holds stays fresh: parameters and buffers (BatchNorm statistics).
        fresh = {
            name: {k: v.detach().clone() for k, v in _submodule(model, name, "init.reset").state_dict().items()}
            for name in reset
        }
        report = load_model_weights(Path(weights), model, strict=strict and not reset, trust=trust)
        for name, state in fresh.items():
            _submodule(model, name, "init.reset").load_state_dict(state)
        reset_names = {f"{name}.{k}" for name, state in fresh.items() for k in state}
        report["loaded"] = [k for k in report["loaded"] if k not in reset_names]
        report["reset"] = sorted(reset_names)
        log.info(
            "Loaded %d tensors from %s; fresh (reset, missing or shape-mismatched): %s; unused: %s",
            len(report["loaded"]),
            weights,
            ", ".join(sorted(set(report["reset"]) | set(report["missing"]) | set(report["mismatched"]))) or "none",
            ", ".join(report["unexpected"]) or "none",
        )
    frozen = 0
    for name in freeze:
        for p in _submodule(model, name, "init.freeze").parameters():
            p.requires_grad_(False)
            frozen += p.numel()
    if freeze:
        log.info("Froze %s (%d parameters)", ", ".join(freeze), frozen)
    report["frozen_parameters"] = frozen
    return report
