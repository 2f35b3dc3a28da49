"""A small DataModule base: datasets in, DataLoaders with the GLOBAL batch size out.

The engine re-creates each DataLoader with a per-rank batch size (global / data-parallel
size) and a sampler from the strategy, as Lightning does, so a datamodule never needs to
know whether it runs distributed. Any object with ``setup(stage)`` and
``train/val/test_dataloader()`` returning map-style DataLoaders works the same way.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.utils.data import DataLoader, Dataset, Subset

from framework.data.batched import GatheringTensorDataset


class BaseDataModule:
    """The built-in datamodules' base: subclasses set train_set/val_set/test_set in setup()."""

    def __init__(
        self,
        batch_size: int,
        num_workers: int = 0,
        input_shape: Optional[list] = None,
        num_classes: Optional[int] = None,
    ):
        # input_shape / num_classes describe the data; models read them by interpolation
        # (${datamodule.num_classes}); subclasses check them against the data in setup().
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.input_shape = list(input_shape) if input_shape is not None else None
        self.num_classes = num_classes
        self.train_set: Optional[Dataset] = None
        self.val_set: Optional[Dataset] = None
        self.test_set: Optional[Dataset] = None
        self.predict_set: Optional[Dataset] = None  # None: predict on the test split

    def setup(self, stage: str) -> None:
        """Create ``train_set``/``val_set``/``test_set``; ``stage`` is "fit", "validate", "test" or "predict"."""
        raise NotImplementedError

    def _loader(self, dataset: Optional[Dataset], shuffle: bool) -> Optional[DataLoader]:
        if dataset is None:
            return None
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            collate_fn=getattr(dataset, "collate", None),  # (a dataset that batches its own: prompts padded per batch)
        )

    def train_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.test_set, shuffle=False)

    def predict_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.predict_set if self.predict_set is not None else self.test_set, shuffle=False)

    @classmethod
    def split_problems(cls, samples: int, val_fraction, test_fraction) -> list[str]:
        """Fractions in [0, 1) that leave every split asked for (and training) at least one of
        ``samples`` samples; messages keyed relative to the datamodule's node (a subclass's
        ``check_config`` asks before start, its ``setup`` of the data it read)."""
        problems = [
            f"{key}: must be in [0, 1), got {value}"
            for key, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction))
            if isinstance(value, (int, float)) and not 0 <= value < 1
        ]
        if problems or not all(isinstance(v, (int, float)) for v in (val_fraction, test_fraction)):
            return problems
        sizes = {"val": int(round(samples * val_fraction)), "test": int(round(samples * test_fraction))}
        train = samples - sizes["val"] - sizes["test"]
        if train < 1:
            problems.append(
                f"val_fraction + test_fraction: {val_fraction} + {test_fraction} leave no training sample of "
                f"{samples}; their sum must stay below 1"
            )
        for split, fraction in (("val", val_fraction), ("test", test_fraction)):
            if fraction > 0 and sizes[split] < 1:
                problems.append(
                    f"{split}_fraction: {fraction} of {samples} samples is no sample; use at least "
                    f"{1 / samples:.2g}, or 0 for no {split} split"
                )
        return problems

    def _check_shape(self, sample_shape, num_classes: int, source: str) -> None:
        shape = list(sample_shape)
        if self.input_shape is not None and self.input_shape != shape:
            raise ValueError(
                f"datamodule.input_shape: {self.input_shape} does not match the data ({shape}) of {source}"
            )
        if self.num_classes is not None and self.num_classes != num_classes:
            raise ValueError(
                f"datamodule.num_classes: {self.num_classes} does not match the data "
                f"({num_classes} classes) of {source}"
            )


def train_split_size(samples: int, fractions: list) -> Optional[int]:
    """The samples ``split_indices`` leaves to training of ``samples`` after ``fractions`` (None: a value that
    is not a number; its own check names it)."""
    if not isinstance(samples, int) or not all(
        isinstance(f, (int, float)) and not isinstance(f, bool) for f in fractions
    ):
        return None
    return samples - sum(int(round(samples * f)) for f in fractions)


def split_indices(n: int, fractions: list[float], seed: int) -> list[list[int]]:
    """Split range(n) by a seeded permutation into len(fractions)+1 parts (the rest last)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    parts, start = [], 0
    for fraction in fractions:
        size = int(round(n * fraction))
        parts.append(perm[start : start + size])
        start += size
    parts.append(perm[start:])
    return parts


def split_dataset(dataset: Dataset, fractions: list[float], seed: int) -> list[Dataset]:
    """``dataset`` split by ``split_indices``: Subsets, or for in-memory tensors the parts'
    own tensors (the same samples in the same order, one gather per batch without a Subset's
    index lookup)."""
    parts = split_indices(len(dataset), fractions, seed)
    if isinstance(dataset, GatheringTensorDataset):
        return [
            GatheringTensorDataset(*(t[torch.as_tensor(idx, dtype=torch.long)] for t in dataset.tensors))
            for idx in parts
        ]
    return [Subset(dataset, idx) for idx in parts]
