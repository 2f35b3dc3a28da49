"""One optimizer step of training: the micro-batches of an accumulation window forward and
backward, then the strategy's optimizer step. What the loop does around it (counting, the
scheduler, logging, the stop vote, callbacks) is the Trainer's."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import torch

from framework.engine.memory import model_state_bytes
from framework.strategies.comm.collectives import all_reduce


class TrainingStep:
    """Forward, backward and step for the ``task`` on the ``strategy``, in ``precision``."""

    def __init__(self, task, strategy, precision, config, on_device: Callable):
        self.task, self.strategy, self.precision, self.config = task, strategy, precision, config
        self.on_device = on_device
        self.current_batch = None  # the micro-batch being run, on the device
        self.model_state_bytes: Optional[dict] = None  # params + grads + optimizer state on this rank
        # The loss is the mean over the global batch's counted targets (a datamodule that masks them)
        self.counts_targets = False
        self.rollouts = None  # a task that samples its micro-batches from the policy (engine/rollout_steps.py)
        self._null = contextlib.nullcontext()

    def run(self, model, optimizer, batches: Iterator, size: int, micro_batch_done: Callable):
        """``size`` micro-batches of ``batches``, then one optimizer step. ``micro_batch_done(loss,
        last)`` runs after each backward. Returns (the summed detached losses, the last
        micro-batch's metrics, its loss)."""
        if self.strategy.owns_training_step:
            if self.counts_targets:  # (named before start: cross_checks.check_masked_targets)
                raise ValueError("a pipeline's schedule averages micro-batch means, not masked targets")
            return self._run_by_strategy(model, optimizer, batches, size, micro_batch_done)
        if self.rollouts is not None:
            window = self.rollouts.window(model, batches, size)
        else:
            window = [self.on_device(next(batches)) for _ in range(size)] if self.counts_targets else None
        per_target = self._global_targets(window) if window else None
        accum, step_loss = self.config.accumulate_grad_batches, None
        for i in range(size):
            self.current_batch = batch = window[i] if window else self.on_device(next(batches))
            # Only the last micro-batch of an accumulation window all-reduces gradients.
            sync = self._null if i == size - 1 else self.strategy.no_sync(model)
            with sync, self.strategy.step_context(model, batch) as local:
                with self.precision.autocast():
                    loss, metrics = self.task.step(model, local, "train")
                if per_target is not None:  # its share of the window's mean over every rank's targets
                    share = loss / (per_target / self.task.counted(local[1])).to(loss.dtype)
                    self.strategy.backward(model, share, self.precision)
                else:
                    self.strategy.backward(model, loss / accum if accum > 1 else loss, self.precision)
            loss = loss.detach()
            total = share.detach() * size if per_target is not None else loss  # (the logged mean is theirs)
            step_loss = total if step_loss is None else step_loss + total
            micro_batch_done(loss, i == size - 1)
        self.optimizer_step(model, optimizer)
        return step_loss, metrics, loss

    def _global_targets(self, window: list) -> torch.Tensor:
        """The counted targets of the window's micro-batches on every rank, per rank that backs a
        part of them: a micro-batch's loss (a mean over its own counted targets, ``n``) divided by
        this over ``n`` is its share of the mean over the global batch. (The strategies average
        gradients over the data- and context-parallel ranks, and the ranks that hold a batch whole,
        tensor- or pipeline-parallel ones, all count it: the world over the context-parallel
        degree.) With equal counts it is the window's length times ``n``, the plain ``1 / accum``."""
        counted = torch.stack([self.task.counted(batch[1]) for batch in window]).sum().double()
        cp = getattr(getattr(self.strategy, "topology", None), "cp", 1)
        # (none counted anywhere, every answer of a window masked: each share is 0, not 0 / 0)
        return (all_reduce(counted, "sum") / (self.strategy.world_size * cp)).clamp(min=1e-12)

    def _run_by_strategy(self, model, optimizer, batches: Iterator, size: int, micro_batch_done: Callable):
        """The same step where the strategy runs forward and backward (a pipeline's schedule): it
        gets the window's micro-batches and the task's ``loss(output, targets)``, and returns each
        micro-batch's loss (the same on every rank)."""
        accum = self.config.accumulate_grad_batches
        window = [self.on_device(next(batches)) for _ in range(size)]
        self.current_batch = window[-1]

        def loss_of(output, targets):
            loss = self.task.loss(output, targets)
            return loss / accum if accum > 1 else loss

        with self.precision.autocast():
            losses = self.strategy.training_step(model, window, loss_of) * accum  # each micro-batch's own loss
        for i in range(size):
            micro_batch_done(losses[i], i == size - 1)
        self.optimizer_step(model, optimizer)
        return losses.sum(), {}, losses[-1]

    def optimizer_step(self, model, optimizer) -> None:
        cfg = self.config
        self.strategy.optimizer_step(
            model, optimizer, self.precision, cfg.gradient_clip_val, cfg.gradient_clip_algorithm
        )
        if self.model_state_bytes is None:  # once, while gradients and optimizer state both exist
            self.model_state_bytes = self.strategy.model_state_bytes(model, optimizer) or model_state_bytes(
                self.strategy.unwrap(model), self.strategy.inner_optimizer(optimizer)
            )
        self.strategy.zero_grad(optimizer)

    @staticmethod
    def mean_loss(step_loss: torch.Tensor, size: int) -> torch.Tensor:
        return step_loss / size if size > 1 else step_loss
