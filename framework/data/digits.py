"""The UCI handwritten digits (8x8, 1,797 images), shipped with the package: no download."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from framework.data.base import BaseDataModule, split_dataset, train_split_size
from framework.data.batched import GatheringTensorDataset

DIGITS_FILE = Path(__file__).parent / "assets" / "digits.csv.gz"  # source and licence: assets/README.md


def load_digits(classes: list[int] | None = None, relabel: bool = False) -> GatheringTensorDataset:
    """All digits as (float images [N, 1, 8, 8] in [0, 1], int64 labels), optionally only ``classes``
    (``relabel``: labels become positions in ``classes``, e.g. [5..9] -> [0..4])."""
    with gzip.open(DIGITS_FILE, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float32)
    images = torch.from_numpy(data[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    labels = torch.from_numpy(data[:, 64].astype(np.int64))
    if classes is not None:
        keep = torch.isin(labels, torch.tensor(classes))
        images, labels = images[keep], labels[keep]
        if relabel:
            labels = torch.searchsorted(torch.tensor(sorted(classes)), labels)
    return GatheringTensorDataset(images, labels)


class DigitsDataModule(BaseDataModule):
    """Train/val/test split of the digits by a fixed seed (independent of the training seed).

    ``classes``: keep only these digits, e.g. [0, 1, 2, 3, 4]; ``relabel``: number them 0..k-1
    (so ``num_classes`` = len(classes)), else keep the digit as the label.
    """

    inputs, targets = "features", "classes"  # what the checks before start match against model and task

    def __init__(
        self,
        batch_size: int = 64,
        num_workers: int = 0,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        split_seed: int = 0,
        input_shape: list = (1, 8, 8),
        num_classes: int = 10,
        classes: list | None = None,
        relabel: bool = False,
    ):
        super().__init__(batch_size, num_workers, input_shape, num_classes)
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.classes = list(classes) if classes is not None else None
        self.relabel = relabel

    # Samples per digit 0-9 in the bundled file (so that the splits are checked without reading it).
    CLASS_COUNTS = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)

    @classmethod
    def check_config(
        cls, val_fraction: float = 0.1, test_fraction: float = 0.2, classes=None, input_shape=(1, 8, 8), **_
    ) -> list[str]:
        chosen = classes if isinstance(classes, (list, tuple)) else range(10)
        samples = sum(cls.CLASS_COUNTS[c] for c in chosen if isinstance(c, int) and 0 <= c < 10)
        problems = cls.split_problems(samples, val_fraction, test_fraction)
        if input_shape is not None and list(input_shape) != [1, 8, 8]:
            problems.append(
                f"input_shape: the digits are 1x8x8 images ([1, 8, 8]), not {list(input_shape)}; "
                "leave it at [1, 8, 8] (the models read it)"
            )
        return problems

    @classmethod
    def train_samples(cls, val_fraction: float = 0.1, test_fraction: float = 0.2, classes=None, **_) -> Optional[int]:
        """The digits of the training split (what ``val_fraction`` and ``test_fraction`` leave of ``classes``'),
        counted from ``CLASS_COUNTS`` without reading the file."""
        chosen = classes if isinstance(classes, (list, tuple)) else range(10)
        if not all(isinstance(c, int) and 0 <= c < 10 for c in chosen):
            return None
        return train_split_size(sum(cls.CLASS_COUNTS[c] for c in chosen), [val_fraction, test_fraction])

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        problems = self.check_config(self.val_fraction, self.test_fraction, self.classes)
        if problems:
            raise ValueError("; ".join(f"datamodule.{p}" for p in problems))
        dataset = load_digits(self.classes, self.relabel)
        self._check_shape([1, 8, 8], len(self.classes) if self.relabel else 10, "the digits data")
        self.val_set, self.test_set, self.train_set = split_dataset(
            dataset, [self.val_fraction, self.test_fraction], self.split_seed
        )
