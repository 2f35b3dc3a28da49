"""Batched fetching for in-memory datasets: one indexed gather per batch instead of one
``__getitem__`` per sample and a collate.

torch's DataLoader hands a whole batch of indices to ``dataset.__getitems__`` when the dataset
has one (``Subset`` passes it through). ``GatheringTensorDataset.__getitems__`` gathers every
tensor at once and returns ``GatheredSamples``: to any collate_fn still a sequence of (x, y, ...)
samples, each the very tensors ``TensorDataset`` would give, so nothing changes for code that
does not know it; the engine's ``collate_for(default_collate)`` takes the gathered tensors as
the batch directly. The values are the same either way, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import TensorDataset, default_collate


class GatheredSamples(Sequence):
    """The samples at some indices of a tensor dataset, gathered: ``tensors`` holds one batched
    tensor per field; indexing gives the samples one by one."""

    def __init__(self, tensors: tuple[torch.Tensor, ...]):
        self.tensors = tensors

    def __len__(self) -> int:
        return len(self.tensors[0])

    def __getitem__(self, i):
        return tuple(t[i] for t in self.tensors)


class GatheringTensorDataset(TensorDataset):
    """A TensorDataset that fetches a batch with one index per tensor (``__getitems__``)."""

    def __getitems__(self, indices: list[int]) -> GatheredSamples:
        index = torch.as_tensor(indices, dtype=torch.long)
        return GatheredSamples(tuple(t.index_select(0, index) for t in self.tensors))  # faster than t[index]


class GatheredCollate:
    """torch's default collate, except that a gathered batch is already collated (a class, not a
    closure, so that DataLoader worker processes can pickle it)."""

    def __call__(self, data):
        if isinstance(data, GatheredSamples):
            return list(data.tensors)  # what default_collate makes of (x, y) samples: [x_batch, y_batch]
        return default_collate(data)


def collate_for(collate_fn):
    """The collate the engine uses for a loader whose collate is ``collate_fn``: the default one
    learns to pass gathered batches through; a user's own is kept (it sees samples as always)."""
    return GatheredCollate() if collate_fn is default_collate else collate_fn
