"""Windows of a prepared split, read from its shards with one positional read each: a rank's
resident memory holds the windows it reads, not the corpus. (Not a memory map: every page a map
touches stays in the process's resident set, here a whole 2 MiB page-cache folio per window, so a
long run's memory grew with the corpus it had sampled; a read leaves the pages to the page cache.)

Window ``i`` is tokens [i * seq_len, i * seq_len + seq_len + 1) of the split's stream (its shards one
after another): the inputs, and the same shifted by one as the targets. With ``positions`` each
window also gets its tokens' positions within their documents, restarting at 0 where a document
starts (and at the window's first token), from which a model keeps documents apart.

A shard is checked against its checksum in the index before any of its tokens is used, once per
process: the one a read needs at once, the others by a thread in the background meanwhile
(``ShardChecks``); a damaged shard fails the read, naming the file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

from framework.config.errors import InputError
from framework.data.batched import GatheredSamples
from framework.data.sampler import feistel
from framework.data.token_shards import file_crc32, offsets_file


class ShardChecks:
    """Each shard's CRC-32 against the index's, checked once in this process before its tokens are
    used (``ensure``); a daemon thread checks the others meanwhile. A corpus prepared before the index
    held checksums is not checked."""

    def __init__(self, files: list[str], checksums: list[Optional[int]]):
        self.files, self.checksums, self.pid = files, checksums, os.getpid()
        self.results: list = [None] * len(files)  # None: not yet; True: whole; else what is wrong
        self.locks = [threading.Lock() for _ in files]
        threading.Thread(target=self._check_all, daemon=True, name="shard-checks").start()

    def ensure(self, shard: int) -> None:
        """Return once ``shard`` is known whole; InputError naming it when it is not."""
        if self.results[shard] is not True:
            self._check(shard)
            if self.results[shard] is not True:
                raise InputError(self.results[shard])

    def _check(self, shard: int) -> None:
        with self.locks[shard]:
            if self.results[shard] is not None:
                return
            expected = self.checksums[shard]
            found = expected if expected is None else file_crc32(self.files[shard])
            self.results[shard] = (
                True
                if found == expected
                else f"datamodule.path: shard '{self.files[shard]}' is damaged: its checksum is {found}, the index "
                f"says {expected} (changed or corrupted since it was prepared); prepare the corpus again"
            )

    def _check_all(self) -> None:
        for shard in range(len(self.files)):
            self._check(shard)


class TokenWindows(Dataset):
    shuffle_order = staticmethod(feistel)  # the engine's sampler: an order computed per position, flat in memory

    def __init__(self, directory, shards: list[dict], dtype: str, seq_len: int, positions: bool = False):
        self.files = [str(Path(directory) / shard["file"]) for shard in shards]
        self.checksums = [shard.get("crc32") for shard in shards]
        self._checks: Optional[ShardChecks] = None
        self.dtype, self.seq_len, self.positions = dtype, seq_len, positions
        self.bounds = np.concatenate([[0], np.cumsum([shard["tokens"] for shard in shards], dtype=np.int64)])
        self.windows = max(0, int(self.bounds[-1] - 1) // seq_len)
        self.itemsize = np.dtype(dtype).itemsize
        self._files = None  # opened in the process that reads (a spawned DataLoader worker opens its own)
        self._starts = None

    def __len__(self) -> int:
        return self.windows

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": None, "_starts": None, "_checks": None}

    def __del__(self) -> None:
        for descriptor in self.__dict__.get("_files") or ():
            os.close(descriptor)

    def _open(self) -> None:
        # (a forked worker shares these descriptors: positional reads move no shared offset)
        self._files = [os.open(f, os.O_RDONLY) for f in self.files]
        self._checked()
        if self.positions:
            docs = [
                np.load(offsets_file(f), allow_pickle=False) + base for f, base in zip(self.files, self.bounds[:-1])
            ]
            self._starts = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream, across shard ends where the span crosses one."""
        first = int(np.searchsorted(self.bounds, start, side="right")) - 1
        parts, position = [], start
        checks = self._checked()
        for shard in range(first, len(self._files)):
            if position >= stop:
                break
            checks.ensure(shard)
            base = int(self.bounds[shard])
            end = min(stop, int(self.bounds[shard + 1]))
            raw = os.pread(self._files[shard], (end - position) * self.itemsize, (position - base) * self.itemsize)
            parts.append(np.frombuffer(raw, dtype=self.dtype))
            position = end
        return np.concatenate(parts).astype(np.int64) if len(parts) > 1 else parts[0].astype(np.int64)

    def _checked(self) -> ShardChecks:
        """This process's checks (a forked DataLoader worker starts its own: threads do not fork)."""
        if self._checks is None or self._checks.pid != os.getpid():
            self._checks = ShardChecks(self.files, self.checksums)
        return self._checks

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
