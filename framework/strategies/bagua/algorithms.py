"""Bagua's algorithms: what happens to gradients before the optimizer step, and to weights
after it. Each counts the bytes its rank sends (``sent``)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from framework.strategies.bagua.reduce import (
    allreduce_average,
    bytegrad_average,
    dequantize,
    hierarchical_average,
    quantize,
)
from framework.strategies.comm.bytes import allgather_bytes, flat, unflatten_into


class Algorithm:
    def __init__(self, options, rank: int, world: int, groups=None):
        self.options, self.rank, self.world, self.groups = options, rank, world, groups
        self.sent = 0.0
        self.steps = 0

    def before_step(self, params: list[torch.Tensor]) -> None:
        """The gradients of a finished accumulation window, before the optimizer step."""

    def after_step(self, params: list[torch.Tensor]) -> None:
        """The weights, after the optimizer step."""
        self.steps += 1

    def step_lock(self):
        """Held during the optimizer step (an algorithm with a thread of its own locks it out)."""
        return contextlib.nullcontext()

    def end_training(self, params: list[torch.Tensor]) -> None:
        """The last training step is done (before the final validation, test and saves)."""

    def _average_gradients(self, params, average) -> None:
        """All gradients in one flat buffer, averaged by ``average(buffer) -> bytes sent``."""
        grads = [p.grad for p in params if p.grad is not None]
        buffer = flat(grads)
        self.sent += average(buffer)
        unflatten_into(buffer, grads)


class GradientAllReduce(Algorithm):
    """Full-precision gradient averaging (``hierarchical``: within nodes first)."""

    def before_step(self, params) -> None:
        if self.options.hierarchical:
            self._average_gradients(params, lambda b: hierarchical_average(b, self.world, self.groups))
        else:
            self._average_gradients(params, lambda b: allreduce_average(b, self.world))


class ByteGrad(Algorithm):
    """8-bit min-max quantised gradient averaging."""

    def before_step(self, params) -> None:
        self._average_gradients(params, lambda b: bytegrad_average(b, self.world))


class Decentralized(Algorithm):
    """No gradient exchange: every ``communication_interval`` steps each rank averages its
    weights with its peers (``all``, or ``shift_one``: one peer, a different one each time)."""

    def after_step(self, params) -> None:
        super().after_step(params)
        if self.steps % self.options.communication_interval:
            return
        weights = [p.data for p in params]
        buffer = flat(weights)
        nbytes = buffer.numel() * buffer.element_size()
        if self.options.peer_selection == "all":
            self.sent += allreduce_average(buffer, self.world)
        else:
            peer = (self.steps // self.options.communication_interval - self.rank) % self.world
            if peer == self.rank:
                return
            theirs = torch.empty_like(buffer)
            for op in dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, buffer, peer), dist.P2POp(dist.irecv, theirs, peer)]
            ):
                op.wait()
            buffer.add_(theirs).div_(2)
            self.sent += nbytes
        unflatten_into(buffer, weights)


class LowPrecisionDecentralized(Algorithm):
    """Decentralized averaging with all peers, of 8-bit quantised weight differences: each rank
    sends how far its weights moved from the last common ones."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.common: torch.Tensor | None = None

    def after_step(self, params) -> None:
        super().after_step(params)
        weights = [p.data for p in params]
        if self.common is None:
            self.common = flat(weights)  # the weights before the first step were broadcast: equal
            return
        if self.steps % self.options.communication_interval:
            return
        levels, meta = quantize((flat(weights) - self.common)[None, :])
        all_levels = [torch.empty_like(levels) for _ in range(self.world)]
        all_meta = [torch.empty_like(meta) for _ in range(self.world)]
        dist.all_gather(all_levels, levels)
        dist.all_gather(all_meta, meta)
        self.sent += allgather_bytes(levels.numel() + 8, self.world)
        self.common += dequantize(torch.cat(all_levels), torch.cat(all_meta)).mean(dim=0).to(self.common.dtype)
        unflatten_into(self.common, weights)


class QAdamWarmup(Algorithm):
    """QAdam's gradient side: full-precision averaging during the warm-up; afterwards the
    optimizer (qadam.QAdam, set as ``optimizer``) exchanges compressed momentum itself."""

    optimizer = None

    def before_step(self, params) -> None:
        if self.optimizer.next_step_in_warmup():
            self._average_gradients(params, lambda b: allreduce_average(b, self.world))


# (the async one, a module of its own, joins them in the package's registry)
SYNCHRONOUS = {
    "gradient_allreduce": GradientAllReduce,
    "bytegrad": ByteGrad,
    "decentralized": Decentralized,
    "low_precision_decentralized": LowPrecisionDecentralized,
    "qadam": QAdamWarmup,
}
