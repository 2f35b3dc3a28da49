"""Classification: cross-entropy loss, accuracy, and any declared epoch metrics."""

from __future__ import annotations

from typing import Any, Mapping, Optional

import torch
from torch.nn import functional as F

from framework.config.ranges import Range
from framework.tasks.metrics import EpochMetrics


class ClassificationTask:
    """``step(model, batch, stage) -> (loss, metrics)`` for batches of ``(inputs, integer labels)``.

    Every value is a mean over the batch (a 0-d tensor); the engine weights by batch size
    when it aggregates across batches and ranks. ``stage`` is "train", "val" or "test".
    ``metrics``: name -> torchmetrics object, fed ``(logits, labels)`` every batch and
    computed over the whole epoch on every rank's samples (``val/<name>``, ``test/<name>``,
    and ``train/<name>`` at each training epoch's end with ``train_metrics``).
    """

    targets, model_outputs = "classes", "logits per sample"  # what the checks before start match against data and model

    argument_ranges = {"label_smoothing": Range(low=0, high=1)}

    def __init__(
        self, label_smoothing: float = 0.0, train_metrics: bool = False, metrics: Optional[Mapping[str, Any]] = None
    ):
        self.label_smoothing = label_smoothing
        # Accuracy on every training step costs an argmax per step; off by default.
        self.train_metrics = train_metrics
        stages = ("train", "val", "test") if train_metrics else ("val", "test")
        self.epoch_metrics = EpochMetrics(metrics, stages)

    def step(self, model: torch.nn.Module, batch, stage: str):
        inputs, target = batch
        logits = model(inputs)
        loss = self.loss(logits, target)
        if self.epoch_metrics:
            self.epoch_metrics.update(stage, logits.detach(), target)
        if stage == "train" and not self.train_metrics:
            return loss, {}
        acc = (logits.argmax(dim=-1) == target).float().mean()
        return loss, {"acc": acc}

    def loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, target, label_smoothing=self.label_smoothing)

    def predict_step(self, model: torch.nn.Module, batch) -> dict[str, torch.Tensor]:
        """``prediction``: the most probable class, (batch,); ``prob``: the class probabilities,
        (batch, classes); for batches of ``(inputs, ...)`` or bare inputs."""
        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        prob = torch.softmax(model(inputs).float(), dim=-1)
        return {"prediction": prob.argmax(dim=-1), "prob": prob}
