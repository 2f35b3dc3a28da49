"""QAdam (Bagua): Adam whose momentum, after ``warmup_steps`` of full-precision Adam, is
averaged across ranks in 8 bits (ByteGrad's reduction) while the variance stays frozen at
its warm-up value. The step count lives in each parameter's state, so a checkpoint resumes
in the right phase."""

from __future__ import annotations

import torch

from framework.strategies.bagua.reduce import bytegrad_average
from framework.strategies.comm.bytes import flat, unflatten_into


class QAdam(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        warmup_steps: int = 100,
        world: int = 1,
        counter=None,
    ):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))
        self.warmup_steps, self.world, self.counter = warmup_steps, world, counter

    def next_step_in_warmup(self) -> bool:
        """Does the coming step average full-precision gradients (warm-up, or one rank)?"""
        states = [s for s in self.state.values() if "step" in s]
        done = int(states[0]["step"]) if states else 0
        return done < self.warmup_steps or self.world == 1

    @torch.no_grad()
    def step(self, closure=None):
        compressed = not self.next_step_in_warmup()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                self._moments(p, group, update_variance=not compressed)
            if compressed:  # the momenta, averaged in 8 bits
                momenta = [self.state[p]["m"] for p in params]
                buffer = flat(momenta)
                sent = bytegrad_average(buffer, self.world)
                if self.counter is not None:
                    self.counter(sent)
                unflatten_into(buffer, momenta)
            for p in params:
                self._update(p, group)

    def _moments(self, p: torch.Tensor, group: dict, update_variance: bool) -> None:
        b1, b2 = group["betas"]
        g = p.grad.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else p.grad
        state = self.state[p]
        if not state:
            state.update(step=torch.zeros(()), m=torch.zeros_like(p), v=torch.zeros_like(p))
        state["step"] += 1
        state["m"].mul_(b1).add_(g, alpha=1 - b1)
        if update_variance:
            state["v"].mul_(b2).addcmul_(g, g, value=1 - b2)

    def _update(self, p: torch.Tensor, group: dict) -> None:
        b1, b2 = group["betas"]
        state = self.state[p]
        t = int(state["step"])
        t_v = t if self.world == 1 else min(t, self.warmup_steps)  # the variance froze after warm-up
        m_hat = state["m"] / (1 - b1**t)
        v_hat = state["v"] / (1 - b2**t_v)
        p.addcdiv_(m_hat, v_hat.sqrt().add_(group["eps"]), value=-group["lr"])
