"""torchvision's ResNet-18 architecture, adapted to the input channels, weights from a local file only."""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)


def resnet18(input_shape: list, num_classes: int, weights: str | None = None) -> nn.Module:
    """Build ResNet-18 for ``input_shape`` = [C, H, W] and ``num_classes`` outputs.

    ``weights``: None (random init) or a path to a state_dict (e.g. torchvision's
    ImageNet file). Tensors whose shapes do not match (the classifier head when
    ``num_classes`` != 1000, the stem when C != 3) keep their fresh initialisation and
    are listed in the log.
    """
    from torchvision.models import resnet18 as tv_resnet18  # here: importing torchvision costs seconds

    model = tv_resnet18(weights=None, num_classes=num_classes)
    channels = input_shape[0]
    if channels != 3:
        model.conv1 = nn.Conv2d(channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    if weights is not None:
        path = Path(weights)
        if not path.is_file():
            raise FileNotFoundError(
                f"model.weights: no file at '{path}'. Weights are never downloaded; "
                "copy a ResNet-18 state_dict there or set model.weights=null."
            )
        state = torch.load(path, map_location="cpu", weights_only=True)
        own = model.state_dict()
        loadable = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
        skipped = sorted(set(state) - set(loadable))
        model.load_state_dict(loadable, strict=False)
        log.info("Loaded %d tensors from %s; kept fresh: %s", len(loadable), path, ", ".join(skipped) or "none")
    return model
