"""Averaged copies of a model's weights (the EMA and SWA callbacks), on every strategy.

The averaged tensors are laid out exactly as the model's own: an FSDP2 shard where the
parameter is one, a replica under ddp. So averaging is local to each rank (no communication),
swapping them into the model is a local copy, and they are saved through
torch.distributed.checkpoint beside the model (``sharded_state_dict``): resharded for any
later strategy and world size. Floating buffers (BatchNorm statistics) are averaged with the
parameters, as ``AveragedModel(use_buffers=True)`` does, so no BatchNorm update pass is needed.
The update rules are torch's own (``torch.optim.swa_utils.get_{ema,swa}_multi_avg_fn``).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch


def live_weights(trainer) -> dict[str, torch.Tensor]:
    """The model's parameters and floating buffers by fully qualified name (FSDP2's sharded ones:
    a module that keeps its gathered weights registers those until it reshards)."""
    _reshard(trainer.model)
    model = trainer.unwrapped_model
    weights = {name: p for name, p in model.named_parameters()}
    weights.update({name: b for name, b in model.named_buffers() if b.is_floating_point()})
    return weights


class AveragedWeights:
    """An average of the model's weights under ``update_fn(averaged, current, num_averaged)``."""

    def __init__(self, update_fn: Callable):
        self.update_fn = update_fn
        self.tensors: Optional[dict[str, torch.Tensor]] = None
        self.num_averaged = 0

    def tensors_for(self, trainer) -> dict[str, torch.Tensor]:
        """The averaged tensors, created as copies of the model's when there are none yet."""
        if self.tensors is None:
            self.tensors = {name: t.detach().clone() for name, t in live_weights(trainer).items()}
        return self.tensors

    @torch.no_grad()
    def restart(self, trainer) -> None:
        """The average of one: the model's current weights."""
        tensors = self.tensors_for(trainer)
        for name, t in live_weights(trainer).items():
            tensors[name].copy_(t)
        self.num_averaged = 1

    @torch.no_grad()
    def update(self, trainer) -> None:
        if not self.num_averaged:
            self.restart(trainer)
            return
        live = live_weights(trainer)
        # FSDP2: parameters are DTensors, buffers plain tensors; one foreach op takes one kind
        groups: dict[bool, tuple[list, list]] = {}
        for name, averaged in self.tensors.items():
            pair = groups.setdefault(hasattr(averaged, "to_local"), ([], []))
            pair[0].append(averaged)
            pair[1].append(live[name].detach())
        for averaged, current in groups.values():
            self.update_fn(averaged, current, self.num_averaged)
        self.num_averaged += 1

    @torch.no_grad()
    def swap(self, trainer) -> None:
        """Exchange the model's weights and the averaged ones (twice: back as they were)."""
        live = live_weights(trainer)
        for name, averaged in self.tensors.items():
            kept = live[name].detach().clone()
            live[name].copy_(averaged)
            averaged.copy_(kept)


class AveragingCallback:
    """What the EMA and SWA callbacks share: the average swapped in for the evaluation passes
    ``uses_average`` picks, and its checkpointed state (tensors through DCP, count in trainer.pt)."""

    average: AveragedWeights

    def uses_average(self, stage: str) -> bool:
        raise NotImplementedError

    @contextlib.contextmanager
    def evaluation_weights(self, trainer, stage: str) -> Iterator[None]:
        use = bool(self.average.num_averaged) and self.uses_average(stage)
        if use:
            self.average.swap(trainer)
        try:
            yield
        finally:
            if use:
                self.average.swap(trainer)

    def sharded_state_dict(self, trainer) -> dict[str, torch.Tensor]:
        return self.average.tensors_for(trainer)

    def state_dict(self) -> dict:
        return {"num_averaged": self.average.num_averaged}

    def load_state_dict(self, state: dict) -> None:
        self.average.num_averaged = state["num_averaged"]


def _reshard(model: torch.nn.Module) -> None:
    """FSDP2 keeps a module's gathered weights between forwards when it does not reshard after
    forward (grad_op sharding, the root module): drop them, so that the sharded weights are the
    ones registered, and the next forward gathers them again (swapped or not)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2: nothing is kept gathered
        return
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()
