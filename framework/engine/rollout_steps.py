"""Training micro-batches sampled from the policy, for a task that samples them (``rollout``: task=grpo).

Every ``steps_per_generation`` micro-batches of prompts (null: one optimizer step's), the task samples a
window of answers to the next that many micro-batches the loader gives (fewer at the end of an epoch), then
each optimizer step trains on its share of the window, micro-batch by micro-batch. The loader runs ahead of
the steps inside a window; the loop's count of batches does not, so a checkpoint inside a window records
the place of the first prompts not trained on. On resume the loader gives those prompts again: they are
checked against the answers the checkpoint holds for them and passed over (the answers are not sampled
again: the policy that sampled them is gone)."""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from framework.config.errors import ConfigError
from framework.strategies.comm.collectives import all_gather_object
from framework.tasks.generation import decoding_layout
from framework.tasks.rollout_window import RolloutContext


class RolloutSteps:
    """The training micro-batches of a sampling ``task`` on ``strategy``. ``where()``: the loop's (optimizer
    step, epoch, micro-batches left in the epoch); ``decoding``: generation's layout on this strategy."""

    def __init__(self, task, strategy, precision, on_device: Callable, accumulate: int, where: Callable, decoding):
        self.task, self.strategy, self.precision, self.on_device = task, strategy, precision, on_device
        self.every = task.steps_per_generation or accumulate
        self.spans_steps = self.every > accumulate  # (then the sampling policy's log-probabilities are kept)
        self.where, self.decoding = where, decoding
        self.passed_over = 0  # micro-batches of prompts the loader gives again (resumed inside a window)

    @property
    def place(self) -> tuple[int, int]:
        """This rank's place among the data-parallel ranks (the sampler's)."""
        topology = self.strategy.topology
        return topology.data_parallel_rank(self.strategy.rank), topology.data_parallel_size

    def resumed(self) -> None:
        """A checkpoint's window was loaded: its prompts come from the loader again."""
        self.passed_over = self.task.rollouts_left

    def window(self, model: torch.nn.Module, batches: Iterator, size: int) -> list:
        """This rank's ``size`` training micro-batches of the step, a window sampled first where none is left."""
        rank, ranks = self.place
        if self.passed_over:
            self._pass_over(batches, rank, ranks)
        if not self.task.rollouts_left:
            step, epoch, left = self.where()
            prompts = [self.on_device(next(batches)) for _ in range(min(self.every, left))]
            context = RolloutContext(step, epoch, rank, ranks, all_gather_object, self.spans_steps)
            training = model.training
            model.eval()  # (no dropout in sampling: the answers are the policy's own)
            with decoding_layout(self.decoding), self.precision.autocast(), torch.no_grad():
                self.task.rollout(model, prompts, context)
            model.train(training)
        return [self.on_device(self._padded(self.task.next_rollout(rank, ranks))) for _ in range(size)]

    def _padded(self, batch: tuple) -> tuple:
        """A micro-batch of answers (inputs, targets, advantages, old log-probabilities) padded on the right to a
        multiple of the sequence-parallel degree (tensor parallelism splits each sequence across its ranks):
        padding is attended by nothing before it and counts no target."""
        inputs, targets, advantages, old = batch
        fill = -inputs.shape[1] % self.strategy.sequence_multiple
        if not fill:
            return batch
        pad = torch.nn.functional.pad
        old = pad(old, (0, fill)) if old.numel() else old
        return pad(inputs, (0, fill), value=int(inputs[0, -1])), pad(targets, (0, fill), value=-100), advantages, old

    def _pass_over(self, batches: Iterator, rank: int, ranks: int) -> None:
        for expected in self.task.rollout_rows(rank, ranks):
            given = next(batches)["index"].tolist()
            if given != expected:
                raise ConfigError(
                    [
                        f"ckpt_path: the checkpoint holds answers sampled for prompt rows {expected} of this rank, "
                        f"and the data now gives rows {given} at that place: the prompts or datamodule.batch_size "
                        "changed since it was written; resume with the data and batch size it trained on, or start "
                        "afresh (no ckpt_path)"
                    ]
                )
        self.passed_over = 0
