"""``strategy=horovod``: Horovod's data parallelism on torch.distributed.

As Horovod's ``DistributedOptimizer``: parameters (and optimizer state) are broadcast from
rank 0 at start; a hook on every parameter hands its gradient to the fusion buffer as soon as
backward has accumulated it, and each full buffer (``fusion_threshold_mb``, Horovod's tensor
fusion) starts one asynchronous all-reduce, so communication overlaps the rest of backward; the
optimizer step first waits for them all (``synchronize``). Micro-batches inside ``no_sync``
(``trainer.accumulate_grad_batches``, Horovod's ``backward_passes_per_step``) accumulate
locally and the last one reduces the sum. ``op``: average, sum, or adasum (Adasum's pairwise
combination, power-of-two world sizes); ``compression: fp16`` sends half the bytes. The model
is not wrapped: its parameter names and checkpoints are those of single device.

``backend: horovod`` uses the real horovod.torch instead (``horovod/library.py``), launched with
``horovodrun``; ``native`` (the default) needs nothing but torch.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Literal

import torch
import torch.distributed as dist
from torch import nn

from framework.config.environment import detect_environment
from framework.config.ranges import ranged
from framework.config.schemas import StrategyConfig
from framework.config.topology import Topology
from framework.strategies.base import Strategy
from framework.strategies.comm.bytes import (
    allgather_bytes,
    allreduce_bytes,
    broadcast_model,
    flat,
    gradient_allreduce_bytes,
    unflatten_into,
)
from framework.strategies.horovod import library as horovod_backend
from framework.strategies.horovod.adasum import adasum_tree, is_power_of_two


@dataclass
class HorovodConfig(StrategyConfig):
    name: str = "horovod"
    op: Literal["average", "sum", "adasum"] = "average"  # how gradients are combined across ranks
    compression: Literal["none", "fp16"] = "none"  # gradients sent as fp16
    # native: these hooks on torch.distributed; horovod: horovod.torch under horovodrun.
    backend: Literal["native", "horovod"] = "native"
    # Tensor fusion (Horovod's HOROVOD_FUSION_THRESHOLD): gradients are all-reduced together, one
    # flat buffer per this many MiB as they become ready; 0: each gradient on its own.
    fusion_threshold_mb: float = ranged(64.0, low=0, note=" (0: one all-reduce per gradient)")


class HorovodStrategy(Strategy):
    name = "horovod"
    schema = HorovodConfig
    needs_process_group = True
    process_per_device = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending: list[tuple[list, torch.Tensor, object]] = []  # (params, fused gradients, handle)
        self._bucket: list[torch.Tensor] = []  # parameters whose gradients wait for the next fused all-reduce
        self._bucket_bytes = 0
        self._local = False  # inside no_sync: gradients accumulate without communication
        self.bytes_sent = 0  # by this rank, since the job started
        self.steps = 0
        self._model: nn.Module | None = None

    @classmethod
    def check(cls, topology: Topology, options: HorovodConfig, accelerator: str) -> list[str]:
        problems = []
        if options.op == "adasum" and not is_power_of_two(topology.world_size):
            problems.append(
                f"strategy.op=adasum: combines gradients pairwise and needs a power-of-two number of "
                f"ranks; this job has {topology.world_size} (trainer.devices x trainer.num_nodes)"
            )
        if options.backend == "horovod":
            problems += horovod_backend.horovod_problems(detect_environment(), topology.world_size, options.op)
        return problems

    @property
    def _real(self) -> bool:
        return self.options.backend == "horovod"

    def setup_environment(self) -> None:
        if self._real:
            horovod_backend.init_horovod(self.env)  # then the torch.distributed group, from its rendezvous
        super().setup_environment()

    def teardown(self) -> None:
        super().teardown()
        if self._real:
            horovod_backend.shutdown()

    def parallelize(self, model: nn.Module) -> nn.Module:
        self._model = model
        if self._real:
            horovod_backend.broadcast_parameters(model)
            return model
        broadcast_model(model)
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._gradient_ready)
        return model

    def build_optimizer(self, model: nn.Module, optimizer_factory) -> torch.optim.Optimizer:
        optimizer = super().build_optimizer(model, optimizer_factory)
        if self._real:
            return horovod_backend.distributed_optimizer(
                optimizer, model, self.options.op, self.options.compression, self.accumulate_grad_batches
            )
        for state in optimizer.state.values():  # hvd.broadcast_optimizer_state (empty until a step)
            for value in state.values():
                if torch.is_tensor(value):
                    dist.broadcast(value, src=0)
        return optimizer

    def no_sync(self, model: nn.Module):
        # horovod.torch counts the backward passes itself (backward_passes_per_step).
        return contextlib.nullcontext() if self._real else self._locally()

    @contextlib.contextmanager
    def _locally(self):
        self._local = True
        try:
            yield
        finally:
            self._local = False

    def _gradient_ready(self, param: torch.Tensor) -> None:
        """Backward accumulated ``param.grad``: into the fusion bucket, whose all-reduce starts once
        it holds ``fusion_threshold_mb`` (adasum waits for synchronize)."""
        if self._local or self.options.op == "adasum" or self.world_size == 1:
            return
        self._bucket.append(param)
        self._bucket_bytes += param.grad.numel() * param.grad.element_size()
        if self._bucket_bytes >= self.options.fusion_threshold_mb * 2**20:
            self._flush()

    def _flush(self) -> None:
        """Start the all-reduce of the bucket's gradients, fused into one flat buffer."""
        if not self._bucket:
            return
        params, self._bucket, self._bucket_bytes = self._bucket, [], 0
        sent = flat([p.grad for p in params])
        if self.options.compression == "fp16":
            sent = sent.half()
        if self.options.op == "average":
            sent.div_(self.world_size)  # before the sum, as DDP does
        self.bytes_sent += allreduce_bytes(sent.numel() * sent.element_size(), self.world_size)
        self._pending.append((params, sent, dist.all_reduce(sent, async_op=True)))

    def synchronize(self, model: nn.Module) -> None:
        """Wait for every gradient's all-reduce (hvd.DistributedOptimizer.synchronize)."""
        if self.options.op == "adasum" and self.world_size > 1:
            self._adasum(model)
        self._flush()
        for params, sent, handle in self._pending:
            handle.wait()
            unflatten_into(sent, [p.grad for p in params])
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
        if self._real:  # as Horovod documents for clipping: synchronize, clip, then step without syncing again
            optimizer.synchronize()
            self.steps += 1
            with optimizer.skip_synchronize():
                return super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)
        self.synchronize(model)
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def comm_stats(self) -> dict:
        if self._real and self._model is not None:
            element = 2 if self.options.compression == "fp16" else None
            return {
                "bytes_per_step": gradient_allreduce_bytes(self._model, self.world_size, element),
                "algorithm": f"horovod.torch/{self.options.op}",
            }
        return {
            "bytes_per_step": self.bytes_sent / max(self.steps, 1),
            "algorithm": f"horovod/{self.options.op}" + ("/fp16" if self.options.compression == "fp16" else ""),
        }
