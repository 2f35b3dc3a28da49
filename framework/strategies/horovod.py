"""``strategy=horovod``: Horovod's data parallelism on torch.distributed.

As Horovod's ``DistributedOptimizer``: parameters (and optimizer state) are broadcast from
rank 0 at start; a hook on every parameter starts an asynchronous all-reduce of its gradient
as soon as backward has accumulated it (communication overlaps the rest of backward); the
optimizer step first waits for them all (``synchronize``). Micro-batches inside ``no_sync``
(``trainer.accumulate_grad_batches``, Horovod's ``backward_passes_per_step``) accumulate
locally and the last one reduces the sum. ``op``: average, sum, or adasum (Adasum's pairwise
combination, power-of-two world sizes); ``compression: fp16`` sends half the bytes. The model
is not wrapped: its parameter names and checkpoints are those of single device.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.adasum import adasum_tree, is_power_of_two
from framework.strategies.base import Strategy
from framework.strategies.comm import allgather_bytes, allreduce_bytes, broadcast_model


@dataclass
class HorovodConfig(StrategyConfig):
    name: str = "horovod"
    op: Literal["average", "sum", "adasum"] = "average"
    compression: Literal["none", "fp16"] = "none"


class HorovodStrategy(Strategy):
    name = "horovod"
    schema = HorovodConfig
    needs_process_group = True
    process_per_device = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending: list[tuple[torch.Tensor, torch.Tensor, object]] = []  # (param, sent, handle)
        self._local = False  # inside no_sync: gradients accumulate without communication
        self.bytes_sent = 0  # by this rank, since the job started
        self.steps = 0

    @classmethod
    def check(cls, topology: Topology, options: HorovodConfig, accelerator: str) -> list[str]:
        if options.op == "adasum" and not is_power_of_two(topology.world_size):
            return [f"strategy.op=adasum: combines gradients pairwise and needs a power-of-two number of ranks; "
                    f"this job has {topology.world_size} (trainer.devices x trainer.num_nodes)"]
        return []

    def parallelize(self, model: nn.Module) -> nn.Module:
        broadcast_model(model)
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._gradient_ready)
        return model

    def build_optimizer(self, model: nn.Module, optimizer_factory) -> torch.optim.Optimizer:
        optimizer = super().build_optimizer(model, optimizer_factory)
        for state in optimizer.state.values():  # hvd.broadcast_optimizer_state (empty until a step)
            for value in state.values():
                if torch.is_tensor(value):
                    dist.broadcast(value, src=0)
        return optimizer

    def no_sync(self, model: nn.Module):
        return self._locally()

    @contextlib.contextmanager
    def _locally(self):
        self._local = True
        try:
            yield
        finally:
            self._local = False

    def _gradient_ready(self, param: torch.Tensor) -> None:
        """Backward accumulated ``param.grad``: start its all-reduce (adasum waits for synchronize)."""
        if self._local or self.options.op == "adasum" or self.world_size == 1:
            return
        sent = param.grad.half() if self.options.compression == "fp16" else param.grad
        if self.options.op == "average":
            sent.div_(self.world_size)  # before the sum, as DDP does
        self.bytes_sent += allreduce_bytes(sent.numel() * sent.element_size(), self.world_size)
        self._pending.append((param, sent, dist.all_reduce(sent, async_op=True)))

    def synchronize(self, model: nn.Module) -> None:
        """Wait for every gradient's all-reduce (hvd.DistributedOptimizer.synchronize)."""
        if self.options.op == "adasum" and self.world_size > 1:
            self._adasum(model)
        for param, sent, handle in self._pending:
            handle.wait()
            if sent is not param.grad:
                param.grad.copy_(sent)
        self._pending.clear()
        self.steps += 1

    def _adasum(self, model: nn.Module) -> None:
        for param in model.parameters():
            if param.grad is None:
                continue
            sent = param.grad.half() if self.options.compression == "fp16" else param.grad
            gathered = [torch.empty_like(sent) for _ in range(self.world_size)]
            dist.all_gather(gathered, sent.contiguous())
            self.bytes_sent += allgather_bytes(sent.numel() * sent.element_size(), self.world_size)
            param.grad.copy_(adasum_tree(gathered))

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        self.synchronize(model)
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def comm_stats(self) -> dict:
        return {"bytes_per_step": self.bytes_sent / max(self.steps, 1), "algorithm": f"horovod/{self.options.op}"
                + ("/fp16" if self.options.compression == "fp16" else "")}
