"""The one sampler every strategy uses, so 1 rank and N ranks see the same global batches."""

from __future__ import annotations

import torch
from torch.utils.data import Sampler


class ShardedSampler(Sampler[int]):
    """Rank ``r`` of ``W`` takes positions r, r+W, r+2W, ... of one seeded permutation.

    With a per-rank batch of B/W, batch k on every rank comes from positions
    [k*B, (k+1)*B) of the permutation, so the union over ranks of batch k is exactly
    the single-device global batch k: same seed + same global batch = same optimisation.

    ``drop_last_multiple``: drop the tail that does not fill a whole global batch (training),
    so every rank runs the same number of equal-sized steps. Without it (evaluation), ranks
    may get one sample fewer than others; metrics are reduced as sums, so nothing is padded
    or counted twice.
    """

    def __init__(
        self,
        length: int,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        drop_last_multiple: int | None = None,
    ):
        self.length, self.num_replicas, self.rank = length, num_replicas, rank
        self.shuffle, self.seed, self.drop_last_multiple = shuffle, seed, drop_last_multiple
        self.epoch = 0
        self.start = 0  # positions of this rank's shard to skip (resuming mid-epoch)

    def set_start(self, start: int) -> None:
        """Begin the next iteration ``start`` samples into this rank's shard."""
        self.start = start

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same permutation on every rank)."""
        self.epoch = epoch

    def _used(self) -> int:
        if self.drop_last_multiple:
            return self.length // self.drop_last_multiple * self.drop_last_multiple
        return self.length

    def __iter__(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.length, generator=g)
        else:
            order = torch.arange(self.length)
        mine = order[: self._used()][self.rank :: self.num_replicas][self.start :]
        # In chunks: a corpus of many millions of windows never becomes one list of Python ints.
        return (i for chunk in mine.split(1 << 16) for i in chunk.tolist())

    def __len__(self) -> int:
        used = self._used()
        return max(0, (used - self.rank + self.num_replicas - 1) // self.num_replicas - self.start)
