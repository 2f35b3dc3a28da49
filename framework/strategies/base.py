"""The Strategy interface, with the single-process defaults every strategy starts from.

A strategy decides how many processes a job needs, wraps a plain model (``setup``),
supplies the data sampler, and does the collectives the engine asks for. It is the only
place that knows about parallelism: the engine runs one loop for all of them.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from framework.config.schemas import SingleConfig
from framework.data.sampler import ShardedSampler


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job (all 0 / 1 for a single process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0


def resolve_accelerator(name: str) -> str:
    """``auto`` -> cuda if available, else mps, else cpu; other names unchanged."""
    if name != "auto":
        return name
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def device_for(accelerator: str, local_rank: int) -> torch.device:
    if accelerator == "cuda":
        return torch.device("cuda", local_rank)
    return torch.device(accelerator)


class Strategy:
    """Single process, single device. Subclasses override what differs (one level deep)."""

    name = "single"
    schema: type = SingleConfig

    def __init__(self, options: dict, accelerator: str, env: RankEnv = RankEnv()):
        self.options = options
        self.accelerator = accelerator
        self.env = env
        self.device = device_for(accelerator, env.local_rank)

    # ---- topology (class-level: known before any process starts) ----
    @classmethod
    def processes_per_node(cls, trainer: dict, options: dict) -> int:
        return 1

    @classmethod
    def data_parallel_size(cls, trainer: dict, options: dict) -> int:
        """How many ways the global batch is split across processes."""
        return cls.processes_per_node(trainer, options) * trainer.get("num_nodes", 1)

    @classmethod
    def check(cls, trainer: dict, options: dict, accelerator: str, problems: list[str]) -> None:
        """Append every reason this strategy cannot run ``trainer`` on this machine."""
        if trainer.get("devices", 1) != 1 or trainer.get("num_nodes", 1) != 1:
            problems.append(f"strategy={cls.name}: runs one process on one device, but trainer.devices="
                            f"{trainer.get('devices')} and trainer.num_nodes={trainer.get('num_nodes')}; "
                            "use strategy=ddp (or auto) for several devices")

    # ---- runtime ----
    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world_size(self) -> int:
        return self.env.world_size

    @property
    def is_global_zero(self) -> bool:
        return self.env.rank == 0

    def setup_environment(self) -> None:
        """Join the process group (distributed strategies); nothing for one process."""

    def setup(self, model: nn.Module, optimizer_factory: Callable) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Move/wrap ``model`` and build the optimizer over the parameters it will train (None: no optimizer)."""
        model = model.to(self.device)
        return model, (optimizer_factory(model.parameters()) if optimizer_factory else None)

    def unwrap(self, model: nn.Module) -> nn.Module:
        return model

    def sampler(self, length: int, shuffle: bool, seed: int, drop_last_multiple: int | None) -> ShardedSampler:
        return ShardedSampler(length, self.data_parallel_world(), self.data_parallel_rank(), shuffle, seed,
                              drop_last_multiple)

    def data_parallel_world(self) -> int:
        return self.env.world_size

    def data_parallel_rank(self) -> int:
        return self.env.rank

    def no_sync(self, model: nn.Module):
        """Context for micro-batches that must not all-reduce gradients (accumulation)."""
        return contextlib.nullcontext()

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Sum ("sum") or average ("mean") ``tensor`` over all ranks; returns the result."""
        return tensor

    def all_gather_object(self, obj) -> list:
        return [obj]

    def broadcast_object(self, obj):
        return obj

    def barrier(self) -> None:
        pass

    def clip_gradients(self, model: nn.Module, max_value: float, algorithm: str) -> None:
        params = [p for p in model.parameters() if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, max_value)
        else:
            torch.nn.utils.clip_grad_norm_(params, max_value)

    def teardown(self) -> None:
        pass
