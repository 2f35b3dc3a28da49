"""A small convolutional classifier that adapts to any input size."""

from __future__ import annotations

from torch import nn

from framework.config.ranges import Range


class CNN(nn.Module):
    """Conv-BN-ReLU blocks (2x2 max-pool after each but the last), global average pool, MLP head."""

    inputs, outputs = "features", "logits per sample"

    argument_ranges = {"channels": Range(low=1, each=True), "hidden_size": Range(low=1), "num_classes": Range(low=1)}

    def __init__(
        self,
        input_shape: list,
        num_classes: int,
        channels: list = (32, 64),
        hidden_size: int = 128,
        dropout: float = 0.1,
    ):
        super().__init__()
        in_channels, height, width = input_shape
        blocks: list[nn.Module] = []
        for i, out_channels in enumerate(channels):
            blocks += [
                nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(),
            ]
            # Pool only while the feature map is still larger than 2x2.
            if i < len(channels) - 1 and min(height, width) > 2:
                blocks.append(nn.MaxPool2d(2))
                height, width = height // 2, width // 2
            in_channels = out_channels
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(
            nn.Linear(in_channels, hidden_size), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden_size, num_classes)
        )

    def forward(self, x):
        return self.head(self.features(x))
