"""Transfer learning: start a model from another run's weights, reset or freeze parts of it."""

from __future__ import annotations

import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from torch import nn

from framework.engine.checkpoint import load_model_weights
from framework.engine.checkpoint_files import is_checkpoint

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


@dataclass(frozen=True)
class InitialWeights:
    """``init.weights``: a checkpoint directory, a file torch.save wrote (a model.pt) or a .safetensors file."""

    weights: Optional[str]

    def problems(self) -> list[str]:
        """What keeps the file from being initial weights, before start."""
        path = Path(str(self.weights)) if self.weights else None
        if path is None or not path.exists():
            return []  # (a missing path is reported by the config checks)
        if path.is_dir():
            return (
                []
                if is_checkpoint(path)
                else [
                    f"init.weights: '{path}' is a directory but not a checkpoint (one holds .metadata, trainer.pt "
                    "and manifest.json); pass a checkpoint directory or a model.pt"
                ]
            )
        if path.suffix == ".safetensors":
            return self._safetensors_problems(path)
        if not zipfile.is_zipfile(path):
            return [
                f"init.weights: '{path}' is not a checkpoint: a checkpoint directory, a state_dict file written "
                "by torch.save (model.pt) or a .safetensors file is"
            ]
        return []

    @staticmethod
    def _safetensors_problems(path: Path) -> list[str]:
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(path), framework="pt"):
                return []
        except (SafetensorError, OSError) as err:  # the library's message says what is wrong with the file
            return [f"init.weights: '{path}' is not a readable .safetensors file: {err}"]
