"""Several prepared corpora mixed with weights (``datamodule.path=[A,B] datamodule.weights=[0.75,0.25]``),
as one dataset whose sample at each position is a pure function of the position: deterministic, the
same under any world size, resumed exactly, and in memory flat in the corpora's sizes.

Positions come in blocks of ``BLOCK``: each source gets its quota of every block (its weight times
the block, rounded so that the quotas fill it), spread through the block by the largest deficit, so
any stretch of positions holds each source's share. The k-th position of source s (counted over the
blocks) reads window ``k mod len(s)`` of s through a bijection of s's windows seeded by (seed, s,
k // len(s)): each pass over a source reads its windows in a new order, none twice within a pass.
The engine's sampler shuffles whole blocks on top (``shuffle_order``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from framework.data.batched import GatheredSamples
from framework.data.sampler import feistel

BLOCK = 10_000  # positions per block: shares exact to 1e-4 over every block


def quotas(weights: list[float], block: int = BLOCK) -> list[int]:
    """Each source's positions in a block: its weight's share, rounded by largest remainder."""
    total = sum(weights)
    exact = [w / total * block for w in weights]
    counts = [int(e) for e in exact]
    for i in sorted(range(len(exact)), key=lambda i: counts[i] - exact[i])[: block - sum(counts)]:
        counts[i] += 1
    return counts


def block_pattern(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each position of a block: its source, and its rank among that source's positions in the block
    (the source furthest behind its share takes the next position)."""
    block = sum(counts)
    source, rank, taken = np.zeros(block, np.int64), np.zeros(block, np.int64), [0] * len(counts)
    for position in range(block):
        behind = [c * (position + 1) / block - t for c, t in zip(counts, taken)]
        s = int(np.argmax(behind))
        source[position], rank[position] = s, taken[s]
        taken[s] += 1
    return source, rank


class MixedWindows(Dataset):
    """``sources``: datasets of windows (TokenWindows), ``weights`` their shares; ``length``: positions
    per epoch (by default as many as the sources hold together); ``seed``: the passes' orders."""

    @staticmethod
    def shuffle_order(positions: np.ndarray, length: int, seed: list) -> np.ndarray:
        """The engine's shuffle of a mixture: whole blocks shuffled (a bijection over them), each block's
        positions kept in order (the last block, partial, stays last), so every stretch of samples
        trained on holds each source's share."""
        full = length // BLOCK
        block, offset = np.divmod(np.asarray(positions, dtype=np.int64), BLOCK)
        inside = block < full
        block[inside] = feistel(block[inside], full, seed) if full else block[inside]
        return block * BLOCK + offset

    @classmethod
    def problems(cls, paths: list[str], indexes: list, weights) -> list[str]:
        """Corpora mixed (``paths``, their indexes, None where unread): ``weights`` (null: by the corpora's
        sizes) one finite number > 0 per corpus (an infinite one made every quota NaN: ``quotas``), and the
        corpora of one tokenizer; keyed relative to the datamodule."""
        problems = cls._weight_problems(weights, len(paths)) + cls._repeated_problems(paths)
        return problems + (cls._tokenizer_problems(paths, indexes) if None not in indexes else [])

    @staticmethod
    def _repeated_problems(paths: list[str]) -> list[str]:
        """A corpus named twice (or by two paths to one directory): its windows would come twice in an epoch."""
        where = [Path(str(p)).resolve() for p in paths]
        twice = [str(p) for i, p in enumerate(paths) if where[i] in where[:i]]
        if not twice:
            return []
        return [
            f"path: {', '.join(twice)} named more than once; mix each corpus once (datamodule.weights gives one a "
            "larger share)"
        ]

    @staticmethod
    def _tokenizer_problems(paths: list[str], indexes: list[dict]) -> list[str]:
        prints = {index["tokenizer"]["fingerprint"] for index in indexes}
        if len(prints) < 2:
            return []
        return [
            "path: the corpora were prepared with different tokenizers ("
            + ", ".join(f"{p}: {i['tokenizer']['file'] or 'UTF-8 bytes'}" for p, i in zip(paths, indexes))
            + "); mix corpora of one tokenizer"
        ]

    @staticmethod
    def _weight_problems(weights, sources: int) -> list[str]:
        if weights is None:
            return []
        listed = isinstance(weights, (list, tuple))
        wrong = [w for w in weights if not _positive(w)] if listed else []
        if listed and not wrong and len(weights) == sources and math.isfinite(sum(weights)):
            return []
        why = f" ({', '.join(map(str, wrong))} {'is' if len(wrong) == 1 else 'are'} not)" if wrong else ""
        return [
            f"weights: {weights}; one positive number per corpus of datamodule.path ({sources}), each finite and > 0"
            f"{why}, e.g. [{', '.join(['0.5'] * sources)}] (null: by their sizes)"
        ]

    def __init__(self, sources: list, weights: list[float], seed: int = 0, length: int | None = None):
        self.sources, self.seed = sources, seed
        self.counts = quotas(weights)
        self.source, self.rank = block_pattern(self.counts)
        self.sizes = [len(s) for s in sources]
        self.length = length if length is not None else sum(self.sizes)

    def __len__(self) -> int:
        return self.length

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, window within it) of each position."""
        block, offset = np.divmod(np.asarray(positions, dtype=np.int64), BLOCK)
        source = self.source[offset]
        nth = block * np.asarray(self.counts, dtype=np.int64)[source] + self.rank[offset]
        window = np.empty_like(nth)
        for s, size in enumerate(self.sizes):
            mine = source == s
            passes, within = np.divmod(nth[mine], size)
            for p in np.unique(passes):  # a new order of the source's windows for every pass over it
                chosen = passes == p
                window[np.flatnonzero(mine)[chosen]] = feistel(within[chosen], size, [self.seed, s, int(p)])
        return source, window

    def __getitem__(self, index: int):
        source, window = self.locate(np.array([index]))
        return self.sources[int(source[0])][int(window[0])]

    def __getitems__(self, indices: list[int]) -> GatheredSamples:
        import torch

        sources, windows = self.locate(np.array(indices))
        samples = [self.sources[int(s)][int(w)] for s, w in zip(sources, windows)]
        return GatheredSamples(tuple(torch.stack(field) for field in zip(*samples)))

    def shares(self, positions: np.ndarray) -> list[float]:
        """Each source's share of the samples at ``positions``."""
        counts = np.bincount(self.source[np.asarray(positions, dtype=np.int64) % BLOCK], minlength=len(self.sources))
        return (counts / max(1, counts.sum())).tolist()


def source_names(paths: list[str]) -> list[str]:
    """A short name for each corpus of a mixture (its directory's name, numbered where two agree)."""
    from pathlib import Path

    names = [Path(p).name or str(p) for p in paths]
    return [n if names.count(n) == 1 else f"{i}_{n}" for i, n in enumerate(names)]


def _positive(weight) -> bool:
    return isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight) and weight > 0
