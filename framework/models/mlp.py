"""A multi-layer perceptron over flattened inputs."""

from __future__ import annotations

import math

from torch import nn

from framework.config.ranges import Range


class MLP(nn.Module):
    """Flatten ``input_shape`` (e.g. [1, 8, 8]), then Linear-ReLU(-Dropout) per hidden size, then a head."""

    inputs, outputs = "features", "logits per sample"  # what the checks before start match against data and task

    argument_ranges = {"hidden_sizes": Range(low=1, each=True), "num_classes": Range(low=1)}

    def __init__(self, input_shape: list, num_classes: int, hidden_sizes: list = (128, 64), dropout: float = 0.0):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(input_shape)
        for hidden in hidden_sizes:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x):
        return self.head(self.body(x))
