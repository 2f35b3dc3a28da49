"""DistributedDataParallel: one process per device, gradients all-reduced in buckets during backward.

``strategy.start`` says how the ranks start; the presets name it as Lightning does: ddp_spawn
(torch.multiprocessing.spawn, fresh interpreters), ddp_fork and ddp_notebook (forks of the process
that calls fit, so a notebook's ``_target_: __main__.Net`` comes along; refused where CUDA is
initialised in that process, which a fork cannot use). strategy=ddp forks its ranks from a server
process, which is safer and faster to start in a sweep."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.base import Preset, Strategy
from framework.strategies.comm.bytes import gradient_allreduce_bytes


@dataclass
class DDPConfig(StrategyConfig):
    name: str = "ddp"
    find_unused_parameters: bool = False  # DDP's: allow parameters that get no gradient in a step
    static_graph: bool = False  # DDP's: the graph is the same every step (lets it skip checks)
    bucket_cap_mb: float = ranged(25.0, low=0, strict=True)  # gradients per all-reduce bucket
    gradient_as_bucket_view: bool = False  # gradients are views into the buckets (saves a copy)
    # Compress gradients before the all-reduce: fp16/bf16 halve the bytes; powersgd is low-rank.
    comm_hook: Literal["none", "fp16", "bf16", "powersgd"] = "none"
    powersgd_rank: int = ranged(1, low=1)  # the rank of PowerSGD's low-rank approximation
    # BatchNorm statistics over the global batch instead of each rank's slice.
    sync_batchnorm: bool = False
    # How the local ranks start: elastic (torch's agent, as torchrun, forked from a server process),
    # fork (forks of the process that calls fit: a notebook's classes come along) or spawn (fresh
    # interpreters, torch.multiprocessing.spawn). null: the preset's (ddp_spawn: spawn; ddp_fork and
    # ddp_notebook: fork; ddp: elastic).
    start: Optional[Literal["elastic", "fork", "spawn"]] = None


# The presets of strategy=ddp that name how their ranks start (Lightning's names).
PRESETS = {
    "ddp_spawn": Preset(sets={"start": "spawn"}),
    "ddp_fork": Preset(sets={"start": "fork"}),
    "ddp_notebook": Preset(sets={"start": "fork"}),
}


def apply_ddp(model: nn.Module, device: torch.device, options: DDPConfig) -> DistributedDataParallel:
    """Wrap ``model`` (already on ``device``) in DDP with ``options``."""
    if options.sync_batchnorm:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        find_unused_parameters=options.find_unused_parameters,
        static_graph=options.static_graph,
        bucket_cap_mb=options.bucket_cap_mb,
        gradient_as_bucket_view=options.gradient_as_bucket_view,
    )
    register_comm_hook(ddp, options.comm_hook, options.powersgd_rank)
    return ddp


def register_comm_hook(ddp: DistributedDataParallel, hook: str, rank: int) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


class DDPWrapping:
    """What ddp (with its presets ddp_spawn, ddp_fork, ddp_notebook) and zero share (a mixin beside
    ``Strategy``, not a base of it): the model wrapped in DistributedDataParallel, one process per device."""

    schema = DDPConfig
    needs_process_group = True
    process_per_device = True

    @classmethod
    def check(cls, options: DDPConfig, topology: Topology, accelerator: str) -> list[str]:
        if accelerator == "mps" and topology.processes_per_node > 1:
            return [f"strategy={cls.name}: MPS has one device per machine; use trainer.devices=1"]
        if getattr(options, "sync_batchnorm", False) and accelerator != "cuda":
            # torch's SyncBatchNorm runs on CUDA only: it would fail in every rank once started
            return [
                f"strategy.sync_batchnorm: torch's SyncBatchNorm runs on CUDA only, not on {accelerator}; "
                "set strategy.sync_batchnorm=false (each rank's BatchNorm then sees its slice of the batch)"
            ]
        return []

    @classmethod
    def start_method(cls, options: StrategyConfig) -> str:
        return getattr(options, "start", None) or cls.launcher

    def parallelize(self, model: nn.Module) -> nn.Module:
        self._model = model
        return apply_ddp(model, self.device, self.options)

    def comm_stats(self) -> dict | None:
        """DDP all-reduces every gradient once per step (fp16/bf16 hooks: 2 bytes an element);
        PowerSGD's low-rank factors are not counted."""
        hook = self.options.comm_hook
        if hook == "powersgd" or getattr(self, "_model", None) is None:
            return None
        return {
            "bytes_per_step": gradient_allreduce_bytes(self._model, self.world_size, 2 if hook != "none" else None),
            "algorithm": "ddp/allreduce" + ("" if hook == "none" else f"/{hook}"),
        }

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model.module if isinstance(model, DistributedDataParallel) else model

    def no_sync(self, model: nn.Module):
        # DDP skips the gradient all-reduce inside no_sync(); gradients accumulate locally
        # and the next backward outside it reduces the sum.
        return model.no_sync()


class DDPStrategy(DDPWrapping, Strategy):
    """DistributedDataParallel: gradients all-reduced in buckets during backward. Its presets
    ddp_spawn, ddp_fork and ddp_notebook differ only in how the ranks start (``start``)."""

    name = "ddp"
    holds_nf4 = False  # (DDP would wrap 4-bit weights it cannot broadcast)
    planned = ("ddp",)
    presets = PRESETS
