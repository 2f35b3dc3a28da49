"""``trainer.activation_checkpointing: [ClassName, ...]``: those submodules keep only their
inputs for backward and recompute the rest (torch.utils.checkpoint, non-reentrant).

The module's class is swapped for a subclass of the same name whose forward is checkpointed,
instead of wrapping it in another module: parameter names, state dicts, checkpoints,
``optimizer.param_groups`` patterns and FSDP's ``wrap_classes`` stay exactly as without it,
and DataParallel's replicas (copies of the instance) recompute with their own weights.
BatchNorm statistics are updated once per forward, as without checkpointing.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.checkpoint import checkpoint

_CHECKPOINTED: dict[type, type] = {}


def _norms(module: torch.nn.Module) -> list:
    """The module's BatchNorms that track running statistics."""
    return [m for m in module.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]


@contextlib.contextmanager
def _norm_statistics_kept(module: torch.nn.Module) -> Iterator[None]:
    """The recomputation in backward runs the forward again: BatchNorm would update its running
    statistics a second time with the same batch. Momentum 0 during it leaves them as they are."""
    norms = _norms(module)
    saved = [(m.momentum, m.num_batches_tracked.clone()) for m in norms]
    for m in norms:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, (momentum, tracked) in zip(norms, saved):
            m.momentum = momentum
            m.num_batches_tracked.copy_(tracked)


def _checkpointed_class(cls: type) -> type:
    if cls not in _CHECKPOINTED:

        def forward(self, *args, **kwargs):
            if not torch.is_grad_enabled():  # evaluation: nothing is saved for backward anyway
                return cls.forward(self, *args, **kwargs)
            # (only where there are statistics to keep: torch.compile traces no context_fn of ours)
            kept = {"context_fn": lambda: (contextlib.nullcontext(), _norm_statistics_kept(self))}
            return checkpoint(cls.forward, self, *args, use_reentrant=False, **(kept if _norms(self) else {}), **kwargs)

        _CHECKPOINTED[cls] = type(
            cls.__name__,
            (cls,),
            {"forward": forward, "__qualname__": cls.__qualname__, "__module__": cls.__module__, "_checkpointed": True},
        )
    return _CHECKPOINTED[cls]


@dataclass(frozen=True)
class CheckpointedClasses:
    """The submodule classes named at config ``key`` (``trainer.activation_checkpointing``, or
    ``strategy.wrap_classes``, which names classes of the model the same way)."""

    names: tuple
    key: str = "trainer.activation_checkpointing"

    def problems(self, model: torch.nn.Module) -> list[str]:
        """Each class name must be the class of some submodule (not the root: checkpointing it
        would recompute the loss whole, saving nothing)."""
        present = {type(m).__name__ for name, m in model.named_modules() if name}
        return [
            f"{self.key}: no submodule of {type(model).__name__} is a '{name}'; "
            f"its classes: {', '.join(sorted(present))}"
            for name in self.names
            if name not in present
        ]

    def compiled_problems(self, model: torch.nn.Module) -> list[str]:
        """With ``trainer.compile``: no class may hold a BatchNorm (its statistics are kept
        through the recomputation by a context torch.compile does not trace)."""
        with_norms = sorted({type(m).__name__ for m in model.modules() if type(m).__name__ in self.names and _norms(m)})
        return [
            f"trainer.activation_checkpointing: {name} holds a BatchNorm, whose running statistics checkpointing "
            "keeps through the recomputation in a way torch.compile cannot trace; with trainer.compile, checkpoint "
            "classes without BatchNorm, or set trainer.compile=false"
            for name in with_norms
        ]


def apply_activation_checkpointing(model: torch.nn.Module, requested: Sequence[str]) -> list[str]:
    """Checkpoint every submodule whose class name is in ``requested``, outermost first (one
    nested in another checkpointed one is left alone: its outer one recomputes it). Returns
    their names."""
    done: list[str] = []
    for name, module in model.named_modules():
        if not name or type(module).__name__ not in requested or getattr(module, "_checkpointed", False):
            continue
        if any(name.startswith(f"{outer}.") for outer in done):
            continue
        module.__class__ = _checkpointed_class(type(module))
        done.append(name)
    return done
