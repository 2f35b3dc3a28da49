"""A Task (framework.engine.protocols.Task): step(model, batch, stage) -> (loss, metrics),
each a mean over the batch; the framework weights them by batch size across batches and
ranks and logs them as <stage>/<name>. loss(output, targets) is optional (strategy=pp needs it)."""

from __future__ import annotations

import torch
from torch.nn import functional as F


class RegressionTask:
    def loss(self, prediction: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The training loss of an output (optional: strategy=pp calls it on its last stage)."""
        return F.mse_loss(prediction, target)

    def step(self, model: torch.nn.Module, batch, stage: str):
        inputs, target = batch
        prediction = model(inputs)
        loss = self.loss(prediction, target)
        if stage == "train":
            return loss, {}
        return loss, {"mae": (prediction - target).abs().mean()}
