"""Prompts for generation: each encoded, the set padded on the left to its longest (generation trims
each batch to the batch's own longest), with an attention mask and each prompt's index (the seed of
its draws when generation samples)."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Prompts(Dataset):
    """Samples ``{"input_ids", "attention_mask", "index"}``; ``encoded``: each prompt's token ids (at
    least one), ``pad``: the id the padding holds (never attended)."""

    def __init__(self, encoded: list[list[int]], pad: int):
        longest = max(len(e) for e in encoded)
        self.input_ids = torch.tensor([[pad] * (longest - len(e)) + list(e) for e in encoded], dtype=torch.long)
        self.attention_mask = torch.tensor([[False] * (longest - len(e)) + [True] * len(e) for e in encoded])

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int) -> dict:
        return {
            "input_ids": self.input_ids[i],
            "attention_mask": self.attention_mask[i],
            "index": torch.tensor(i),
        }
