"""A DataModule (framework.engine.protocols.DataModule): setup(stage) and three DataLoaders
with the GLOBAL batch size; the framework shards them across ranks itself."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset


class SineDataModule:
    """y = sin(3x) + noise, x in [-1, 1], generated from a seed (nothing to download)."""

    def __init__(self, batch_size: int = 32, num_samples: int = 512, noise: float = 0.05, seed: int = 0):
        self.batch_size, self.num_samples, self.noise, self.seed = batch_size, num_samples, noise, seed
        self.splits: dict[str, TensorDataset] = {}

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(self.seed)
        x = torch.rand(self.num_samples, 1, generator=generator) * 2 - 1
        y = torch.sin(3 * x[:, 0]) + self.noise * torch.randn(self.num_samples, generator=generator)
        n_val = n_test = self.num_samples // 8
        n_train = self.num_samples - n_val - n_test
        bounds = {"train": (0, n_train), "val": (n_train, n_train + n_val), "test": (n_train + n_val, None)}
        self.splits = {name: TensorDataset(x[a:b], y[a:b]) for name, (a, b) in bounds.items()}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["train"], batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["val"], batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.splits["test"], batch_size=self.batch_size)
