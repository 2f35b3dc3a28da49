"""EMA: an exponential moving average of the weights, validated, tested and checkpointed."""

from __future__ import annotations

import logging

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn

from framework.callbacks.weight_average import AveragedWeights, AveragingCallback
from framework.config.ranges import ArgumentRanges, Range

log = logging.getLogger(__name__)


class EMA(AveragingCallback):
    """Keeps ``ema = decay * ema + (1 - decay) * weights`` after every ``every_n_steps``-th
    optimizer step from ``start_step`` on (before it the average is the weights themselves).
    Validation and test run on the averaged weights (``validate: false``: on the trained ones;
    the test still uses the average); checkpoints hold both (the trained weights as the model,
    for an exact resume; the average under ``callbacks.<name>``, sharded like the model), and
    testing a checkpoint (test_ckpt, framework.evaluate) uses its average. On every strategy."""

    argument_ranges = {"decay": Range(low=0, high=1), "every_n_steps": Range(low=1), "start_step": Range(low=0)}

    def __init__(self, decay: float = 0.999, every_n_steps: int = 1, start_step: int = 0, validate: bool = True):
        ArgumentRanges.of(EMA).check(
            {"decay": decay, "every_n_steps": every_n_steps, "start_step": start_step}, "callbacks.ema"
        )
        self.decay, self.every_n_steps, self.start_step, self.validate = decay, every_n_steps, start_step, validate
        self.average = AveragedWeights(get_ema_multi_avg_fn(decay))

    def on_fit_start(self, trainer) -> None:
        if not self.average.num_averaged:  # (a resumed run restored its average)
            self.average.restart(trainer)
        steps, horizon = trainer.planned_steps(), self.every_n_steps / max(1e-12, 1.0 - self.decay)
        if steps is not None and steps < horizon and trainer.is_global_zero:
            log.warning(
                "EMA: decay %g averages over about %d steps, but this run trains %d; its average (what "
                "validation and test see) still leans on the first weights: lower callbacks.ema.decay, "
                "e.g. to %.3g",
                self.decay,
                round(horizon),
                steps,
                1.0 - 10.0 * self.every_n_steps / steps,
            )

    def on_train_step_end(self, trainer, loss: torch.Tensor) -> None:
        step = trainer.global_step
        if step <= self.start_step:
            self.average.restart(trainer)
        elif step % self.every_n_steps == 0:
            self.average.update(trainer)

    def uses_average(self, stage: str) -> bool:
        return self.validate or stage != "val"
