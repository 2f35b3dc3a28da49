"""Seeded synthetic classification data of any size and shape (benchmarks, tests)."""

from __future__ import annotations

import math
from typing import Optional

import torch

from framework.config.ranges import Range
from framework.data.base import BaseDataModule, split_dataset, train_split_size
from framework.data.batched import GatheringTensorDataset


class SyntheticDataModule(BaseDataModule):
    """Gaussian clusters: one random centre per class, samples = centre + ``noise`` * N(0, 1).

    The same ``seed`` always gives the same data, whatever the training seed or rank.
    """

    inputs, targets = "features", "classes"

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        num_samples: int = 2048,
        input_shape: list = (1, 16, 16),
        num_classes: int = 10,
        noise: float = 1.0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        seed: int = 0,
    ):
        super().__init__(batch_size, num_workers, input_shape, num_classes)
        self.num_samples, self.noise, self.seed = num_samples, noise, seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction

    argument_ranges = {"num_samples": Range(low=1), "noise": Range(low=0)}

    @classmethod
    def check_config(
        cls, num_samples: int = 2048, val_fraction: float = 0.1, test_fraction: float = 0.1, **_
    ) -> list[str]:
        return (
            cls.split_problems(num_samples, val_fraction, test_fraction)
            if isinstance(num_samples, int) and num_samples >= 1
            else []
        )

    @classmethod
    def train_samples(
        cls, num_samples: int = 2048, val_fraction: float = 0.1, test_fraction: float = 0.1, **_
    ) -> Optional[int]:
        """The samples of the training split (what ``val_fraction`` and ``test_fraction`` leave)."""
        return train_split_size(num_samples, [val_fraction, test_fraction])

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        problems = self.check_config(self.num_samples, self.val_fraction, self.test_fraction)
        if problems:
            raise ValueError("; ".join(f"datamodule.{p}" for p in problems))
        g = torch.Generator().manual_seed(self.seed)
        dim = math.prod(self.input_shape)
        centres = torch.randn(self.num_classes, dim, generator=g)
        labels = torch.randint(0, self.num_classes, (self.num_samples,), generator=g)
        inputs = centres[labels] + self.noise * torch.randn(self.num_samples, dim, generator=g)
        dataset = GatheringTensorDataset(inputs.reshape(self.num_samples, *self.input_shape), labels)
        self.val_set, self.test_set, self.train_set = split_dataset(
            dataset, [self.val_fraction, self.test_fraction], self.seed
        )
