"""The one sampler every strategy uses, so 1 rank and N ranks see the same global batches."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch.utils.data import Sampler

_CHUNK = 1 << 16  # positions computed at a time: a corpus's order never becomes one list of ints
_MASK64 = np.uint64(2**64 - 1)


def feistel(positions: np.ndarray, length: int, seed: int) -> np.ndarray:
    """Positions ``positions`` of a seeded permutation of ``range(length)``, each computed alone: a
    4-round Feistel network over the smallest power of 4 at or above ``length``, walked again from
    any value beyond it until it falls inside (cycle walking keeps it a bijection of range(length)).
    Memory: the positions asked for, not the length."""
    half = max(1, (max(length, 2) - 1).bit_length() + 1) // 2
    bits, mask = np.uint64(half), np.uint64((1 << half) - 1)
    keys = np.random.default_rng(seed).integers(0, 2**62, size=4, dtype=np.uint64)
    values = positions.astype(np.uint64)
    todo = np.ones(len(values), dtype=bool)
    while todo.any():
        x = values[todo]
        left, right = x >> bits, x & mask
        for key in keys:  # (uint64 products wrap: a fast mix of the half and the round's key)
            mixed = ((right ^ key) * np.uint64(0x9E3779B97F4A7C15)) & _MASK64
            mixed = (mixed ^ (mixed >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9) & _MASK64
            left, right = right, left ^ ((mixed >> np.uint64(17)) & mask)
        values[todo] = (left << bits) | right
        todo = values >= length
    return values.astype(np.int64)


class ShardedSampler(Sampler[int]):
    """Rank ``r`` of ``W`` takes positions r, r+W, r+2W, ... of one seeded order of the samples.

    With a per-rank batch of B/W, batch k on every rank comes from positions
    [k*B, (k+1)*B) of the order, so the union over ranks of batch k is exactly
    the single-device global batch k: same seed + same global batch = same optimisation.

    ``drop_last_multiple``: drop the tail that does not fill a whole global batch (training),
    so every rank runs the same number of equal-sized steps. Without it (evaluation), ranks
    may get one sample fewer than others; metrics are reduced as sums, so nothing is padded
    or counted twice. ``order``: a function (positions, length, seed) -> samples that gives the
    shuffled order position by position (``feistel``'s, or a dataset's own: memory flat in the number
    of samples, a corpus of billions of tokens), instead of a permutation held whole (torch's randperm).
    """

    def __init__(
        self,
        length: int,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        drop_last_multiple: int | None = None,
        order: Callable[[np.ndarray, int, list], np.ndarray] | None = None,
    ):
        self.length, self.num_replicas, self.rank = length, num_replicas, rank
        self.shuffle, self.seed, self.drop_last_multiple = shuffle, seed, drop_last_multiple
        self.order = order
        self.epoch = 0
        self.start = 0  # positions of this rank's shard to skip (resuming mid-epoch)

    def set_start(self, start: int) -> None:
        """Begin the next iteration ``start`` samples into this rank's shard."""
        self.start = start

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same order on every rank)."""
        self.epoch = epoch

    def _used(self) -> int:
        if self.drop_last_multiple:
            return self.length // self.drop_last_multiple * self.drop_last_multiple
        return self.length

    def __iter__(self):
        first, step = self.rank + self.start * self.num_replicas, self.num_replicas
        if self.shuffle and self.order is not None:
            seed, used, span = [self.seed, self.epoch], self._used(), _CHUNK * step
            chunks = (np.arange(begin, min(begin + span, used), step) for begin in range(first, used, span))
            return (i for chunk in chunks for i in self.order(chunk, self.length, seed).tolist())
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.length, generator=g)
        else:
            order = torch.arange(self.length)
        mine = order[: self._used()][first::step]
        return (i for chunk in mine.split(_CHUNK) for i in chunk.tolist())

    def __len__(self) -> int:
        used = self._used()
        return max(0, (used - self.rank + self.num_replicas - 1) // self.num_replicas - self.start)
