"""Any nn.Module: the config's keys are its constructor's arguments."""

from __future__ import annotations

import torch


class TinyRegressor(torch.nn.Module):
    def __init__(self, in_features: int = 1, hidden: int = 32):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(in_features, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)
