"""Classification: cross-entropy loss, accuracy."""
from __future__ import annotations

import torch
from torch.nn import functional as F


class ClassificationTask:
    """``step(model, batch, stage) -> (loss, metrics)`` for batches of ``(inputs, integer labels)``.

    Every value is a mean over the batch (a 0-d tensor); the engine weights by batch size
    when it aggregates across batches and ranks. ``stage`` is "train", "val" or "test".
    """

    def __init__(self, label_smoothing: float = 0.0, train_metrics: bool = False):
        self.label_smoothing = label_smoothing
        # Accuracy on every training step costs an argmax per step; off by default.
        self.train_metrics = train_metrics

    def step(self, model: torch.nn.Module, batch, stage: str):
        inputs, target = batch
        logits = model(inputs)
        loss = F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)
        if stage == "train" and not self.train_metrics:
            return loss, {}
        acc = (logits.argmax(dim=-1) == target).float().mean()
        return loss, {"acc": acc}
