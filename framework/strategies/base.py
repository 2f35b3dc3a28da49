"""The Strategy interface, with the single-process defaults every strategy starts from.

A strategy decides how many processes a job needs, wraps a plain model (``setup``),
supplies the data sampler, and does the collectives the engine asks for. It is the only
place that knows about parallelism: the engine runs one loop for all of them.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import socket
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from framework.config.schemas import StrategyConfig
from framework.data.sampler import ShardedSampler


@dataclass(frozen=True)
class RankEnv:
    """Where this process sits in the job (all 0 / 1 for a single process)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """Single process, single device, plus the collectives every multi-process strategy
    shares (they are no-ops while no process group exists). Subclasses override what differs."""

    name = "single"
    schema: type = StrategyConfig
    # How a job's local ranks start: "elastic" (torch's elastic agent, as torchrun) or "spawn".
    launcher = "elastic"
    # True when every rank must run every forward together (sharded parameters are
    # all-gathered in forward): evaluation then pads the shorter ranks with extra batches.
    lockstep_forward = False
    # Wrappers such as DDP and FSDP need a process group even for a single process.
    needs_process_group = False
    # One process per device (ddp, fsdp, ...) rather than one per node.
    process_per_device = False

    def __init__(self, options: dict, accelerator: str, env: RankEnv = RankEnv(), devices: int = 1):
        self.options = options
        self.accelerator = accelerator
        self.env = env
        self.devices = devices  # trainer.devices: devices per node
        self.device = device_for(accelerator, env.local_rank)

    # ---- topology (class-level: known before any process starts) ----
    @classmethod
    def processes_per_node(cls, trainer: dict, options: dict) -> int:
        return trainer.get("devices", 1) if cls.process_per_device else 1

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

    @property
    def distributed(self) -> bool:
        return dist.is_available() and dist.is_initialized()

    def setup_environment(self) -> None:
        """Join the job's process group when it has several processes (nccl on CUDA, gloo on CPU)."""
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        if (self.env.world_size > 1 or self.needs_process_group) and not dist.is_initialized():
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            init_method = None
            if self.env.world_size == 1 and "MASTER_ADDR" not in os.environ:
                init_method = f"tcp://127.0.0.1:{free_port()}"  # a one-process group, in this process
            # The timeout turns a hung collective (a rank that died, a mismatched call)
            # into an error instead of a job that waits forever.
            dist.init_process_group(backend, init_method=init_method, rank=self.env.rank,
                                    world_size=self.env.world_size,
                                    timeout=datetime.timedelta(seconds=float(self.options.get("timeout_s", 1800))))

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
        """Sum ("sum"), average ("mean") or maximum ("max") of ``tensor`` over all ranks."""
        if not self.distributed:
            return tensor
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
        return tensor / dist.get_world_size() if op == "mean" else tensor

    def all_gather_object(self, obj) -> list:
        if not self.distributed:
            return [obj]
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def broadcast_object(self, obj, src: int = 0):
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def full_state_dict(self, model: nn.Module) -> dict:
        """The whole model's weights as plain CPU tensors, on rank 0 (collective: call on every rank)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        if not self.distributed:
            return {k: v.detach().cpu() for k, v in self.unwrap(model).state_dict().items()}
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=options)

    def clip_gradients(self, model: nn.Module, max_value: float, algorithm: str) -> None:
        params = [p for p in model.parameters() if p.grad is not None]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, max_value)
        else:
            torch.nn.utils.clip_grad_norm_(params, max_value)

    def checkpoint_state(self, model: nn.Module, optimizer) -> tuple[dict, object]:
        """(state for torch.distributed.checkpoint, extra picklable state for rank 0's file).

        Model and optimizer state use fully qualified parameter names, whatever the wrapper,
        so a checkpoint moves between strategies and world sizes.
        """
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

        if optimizer is None:
            return {"model": get_model_state_dict(model)}, None
        model_state, optim_state = get_state_dict(model, optimizer)
        return {"model": model_state, "optim": optim_state}, None

    def load_checkpoint_state(self, model: nn.Module, optimizer, state: dict, extra) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

        if optimizer is None:
            set_model_state_dict(model, state["model"])
        else:
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def teardown(self) -> None:
        if self.distributed:
            dist.destroy_process_group()
