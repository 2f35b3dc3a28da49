"""ZeRO stage 1: DDP for gradients, optimizer state sharded with ZeroRedundancyOptimizer.

Its checkpoints hold the optimizer state in the layout every other strategy uses (keyed by
fully qualified parameter names, inside the DCP files), so a ZeRO checkpoint resumes under
any strategy and world size, and any checkpoint resumes under ZeRO.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from framework.config.topology import Topology
from framework.strategies.base import Strategy
from framework.strategies.comm.collectives import broadcast_object
from framework.strategies.ddp import DDPWrapping


def init_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """Create the optimizer's state (a step with zero gradients and lr 0), so that a checkpoint
    template has every entry to load into; a loaded checkpoint then overwrites it."""
    if optimizer.state or any(p.grad is not None for g in optimizer.param_groups for p in g["params"]):
        return
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = torch.zeros_like(p) if p.requires_grad else None
    lrs = [group["lr"] for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"] = 0.0
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)


class ZeroStrategy(DDPWrapping, Strategy):
    name = "zero"
    runs_adapters = holds_nf4 = False  # (its sharded optimizer state knows no frozen base)
    planned = ("zero",)

    @classmethod
    def predict_model_state_bytes(
        cls, params: int, optimizer_bytes: int, topology: Topology, model=None, options=None
    ) -> float:
        return 8 * params + optimizer_bytes * params / topology.data_parallel_size

    def build_optimizer(self, model: nn.Module, optimizer_factory: Callable):
        from torch.distributed.optim import ZeroRedundancyOptimizer  # here: it imports FSDP's modules (~1 s)

        # The optimizer partial (e.g. Adam with lr=...) becomes the per-shard optimizer: each
        # rank keeps state for 1/N of the parameters and broadcasts its updated shard.
        return ZeroRedundancyOptimizer(
            self.optimizer_params(model, optimizer_factory),
            optimizer_class=optimizer_factory.func,
            **optimizer_factory.keywords,
        )

    def comm_stats(self) -> dict | None:
        return None  # DDP's all-reduce plus the shards' broadcasts, whose bytes depend on gloo's/nccl's algorithm

    def inner_optimizer(self, optimizer):
        return optimizer.optim  # this rank's shard, in the user's optimizer class

    def _names(self, model: nn.Module, optimizer) -> list[str]:
        """Fully qualified names of the optimizer's parameters, in its (global) order."""
        names = {id(p): n for n, p in self.unwrap(model).named_parameters()}
        return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]

    def checkpoint_state(self, model: nn.Module, optimizer):
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        state = {"model": get_model_state_dict(model)}
        if optimizer is None:
            return state, None
        # Gathered on rank 0 and shared with every rank (DCP writes a replicated entry from
        # any one of them), in the layout of an unsharded optimizer.
        init_optimizer_state(optimizer.optim)
        optimizer.consolidate_state_dict(to=0)
        full = broadcast_object(optimizer.state_dict() if self.is_global_zero else None)
        names = self._names(model, optimizer)
        state["optim"] = {
            "state": {names[i]: value for i, value in full["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in full["param_groups"]],
        }
        return state, None

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict

        set_model_state_dict(model, state["model"])
        if optimizer is None:
            return
        index = {name: i for i, name in enumerate(self._names(model, optimizer))}
        saved = state["optim"]
        # The full state in the optimizer's own layout; every rank keeps its partition of it.
        optimizer.load_state_dict(
            {
                "state": {index[name]: value for name, value in saved["state"].items()},
                "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in saved["param_groups"]],
            }
        )
