"""A Task (framework.engine.protocols.Task): step(model, batch, stage) -> (loss, metrics),
each a mean over the batch; the framework weights them by batch size across batches and
ranks and logs them as <stage>/<name>."""

from __future__ import annotations

import torch
from torch.nn import functional as F


class RegressionTask:
    def step(self, model: torch.nn.Module, batch, stage: str):
        inputs, target = batch
        prediction = model(inputs)
        loss = F.mse_loss(prediction, target)
        if stage == "train":
            return loss, {}
        return loss, {"mae": (prediction - target).abs().mean()}
