"""Windows of a prepared split, read from its shards with one positional read each: a rank's
resident memory holds the windows it reads, not the corpus. (Not a memory map: every page a map
touches stays in the process's resident set, here a whole 2 MiB page-cache folio per window, so a
long run's memory grew with the corpus it had sampled; a read leaves the pages to the page cache.)

Window ``i`` is tokens [i * seq_len, i * seq_len + seq_len + 1) of the split's stream (its shards one
after another): the inputs, and the same shifted by one as the targets. With ``positions`` each
window also gets its tokens' positions within their documents, restarting at 0 where a document
starts (and at the window's first token), from which a model keeps documents apart.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from framework.data.batched import GatheredSamples
from framework.data.token_shards import offsets_file


class TokenWindows(Dataset):
    def __init__(self, directory, shards: list[dict], dtype: str, seq_len: int, positions: bool = False):
        self.files = [str(Path(directory) / shard["file"]) for shard in shards]
        self.dtype, self.seq_len, self.positions = dtype, seq_len, positions
        self.bounds = np.concatenate([[0], np.cumsum([shard["tokens"] for shard in shards], dtype=np.int64)])
        self.windows = max(0, int(self.bounds[-1] - 1) // seq_len)
        self.itemsize = np.dtype(dtype).itemsize
        self._files = None  # opened in the process that reads (a spawned DataLoader worker opens its own)
        self._starts = None

    def __len__(self) -> int:
        return self.windows

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": None, "_starts": None}

    def __del__(self) -> None:
        for descriptor in self.__dict__.get("_files") or ():
            os.close(descriptor)

    def _open(self) -> None:
        # (a forked worker shares these descriptors: positional reads move no shared offset)
        self._files = [os.open(f, os.O_RDONLY) for f in self.files]
        if self.positions:
            docs = [
                np.load(offsets_file(f), allow_pickle=False) + base for f, base in zip(self.files, self.bounds[:-1])
            ]
            self._starts = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream, across shard ends where the span crosses one."""
        first = int(np.searchsorted(self.bounds, start, side="right")) - 1
        parts, position = [], start
        for shard in range(first, len(self._files)):
            if position >= stop:
                break
            base = int(self.bounds[shard])
            end = min(stop, int(self.bounds[shard + 1]))
            raw = os.pread(self._files[shard], (end - position) * self.itemsize, (position - base) * self.itemsize)
            parts.append(np.frombuffer(raw, dtype=self.dtype))
            position = end
        return np.concatenate(parts).astype(np.int64) if len(parts) > 1 else parts[0].astype(np.int64)

    def _positions(self, start: int) -> np.ndarray:
        """Each input token's position in its document, counted from the window's start at most."""
        length = self.seq_len
        lo, hi = np.searchsorted(self._starts, [start + 1, start + length])
        restart = np.zeros(length, dtype=np.int64)
        inside = self._starts[lo:hi] - start
        restart[inside] = inside
        return np.arange(length, dtype=np.int64) - np.maximum.accumulate(restart)

    def __getitem__(self, index: int):
        if self._files is None:
            self._open()
        if not 0 <= index < self.windows:
            raise IndexError(f"window {index} of {self.windows}")
        start = index * self.seq_len
        window = torch.from_numpy(self._span(start, start + self.seq_len + 1))
        sample = (window[:-1], window[1:])
        return (*sample, torch.from_numpy(self._positions(start))) if self.positions else sample

    def __getitems__(self, indices: list[int]) -> GatheredSamples:
        samples = [self[i] for i in indices]
        return GatheredSamples(tuple(torch.stack(field) for field in zip(*samples)))
