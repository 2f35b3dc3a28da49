"""A strategy of your own built on one of the framework's: DDP (its wrapping, checkpoints and what it
can run: adapters included, a class attribute it inherits) that also keeps each optimizer step's
global gradient norm and says the last one in results.json. Selected by ``strategy=traced_ddp``
(configs/strategy/traced_ddp.yaml names it by ``_target_``); its options are DDP's, checked before
any process starts."""

from __future__ import annotations

import torch
from torch import nn

from framework.strategies.ddp import DDPStrategy


class TracedDDPStrategy(DDPStrategy):
    name = "traced_ddp"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.grad_norms: list[float] = []

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        # (the gradients DDP averaged across the ranks in backward: the same norm on every rank)
        norms = [p.grad.norm() for p in model.parameters() if p.grad is not None]
        self.grad_norms.append(float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0)
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)

    def comm_stats(self) -> dict | None:
        stats = super().comm_stats() or {}
        return {**stats, "last_grad_norm": self.grad_norms[-1] if self.grad_norms else None}
