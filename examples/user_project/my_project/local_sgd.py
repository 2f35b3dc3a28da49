"""A strategy of your own: local SGD. Each rank steps on its own gradients (no all-reduce in
backward); every ``sync_every_n_steps`` optimizer steps the ranks average their weights. With
plain SGD and ``sync_every_n_steps: 1`` that is exactly data parallelism (the average of the
ranks' steps is the step on the averaged gradient); larger periods trade accuracy for fewer
collectives. Selected by ``strategy=local_sgd`` (configs/strategy/local_sgd.yaml names it by
``_target_``); its options are checked before any process starts, as the built-in ones are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from framework.config.ranges import ranged
from framework.strategies import Strategy, StrategyConfig
from framework.strategies.comm.collectives import all_reduce


@dataclass
class LocalSGDConfig(StrategyConfig):
    name: str = "local_sgd"
    # Average the ranks' weights after every N optimizer steps (and when training ends).
    sync_every_n_steps: int = ranged(4, low=1)


class LocalSGDStrategy(Strategy):
    name = "local_sgd"
    schema = LocalSGDConfig
    needs_process_group = True  # one process per device, in the job's group
    process_per_device = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = 0

    def optimizer_step(self, model: nn.Module, optimizer, precision, clip_val, clip_algorithm) -> None:
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)
        self.steps += 1
        if self.steps % self.options.sync_every_n_steps == 0:
            self.average(model)

    def end_training(self, model: nn.Module) -> None:
        self.average(model)  # the test, the checkpoints and model.pt see one set of weights

    @torch.no_grad()
    def average(self, model: nn.Module) -> None:
        for p in model.parameters():
            p.copy_(all_reduce(p.detach().clone(), "mean"))
