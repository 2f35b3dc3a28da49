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

``backend: horovod`` selects the real horovod.torch instead (``HorovodLibraryStrategy``, launched
with ``horovodrun``); ``native`` (the default, this class) needs nothing but torch.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

from framework.strategies.base import Strategy
from framework.strategies.comm.bytes import allgather_bytes, allreduce_bytes, broadcast_model, flat, unflatten_into
from framework.strategies.horovod.adasum import adasum_tree
from framework.strategies.horovod.config import HorovodConfig, HorovodFamily
from framework.strategies.horovod.library_strategy import HorovodLibraryStrategy


class HorovodStrategy(HorovodFamily):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pending: list[tuple[list, torch.Tensor, object]] = []  # (params, fused gradients, handle)
        self._bucket: list[torch.Tensor] = []  # parameters whose gradients wait for the next fused all-reduce
        self._bucket_bytes = 0
        self._local = False  # inside no_sync: gradients accumulate without communication
        self.bytes_sent = 0  # by this rank, since the job started

    @classmethod
    def variant(cls, options: HorovodConfig) -> type[Strategy]:
        return HorovodLibraryStrategy if options.backend == "horovod" else cls

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

    @contextlib.contextmanager
    def no_sync(self, model: nn.Module):
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
        self.synchronize(model)
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def comm_stats(self) -> dict:
        return {
            "bytes_per_step": self.bytes_sent / max(self.steps, 1),
            "algorithm": f"horovod/{self.options.op}" + ("/fp16" if self.options.compression == "fp16" else ""),
        }
