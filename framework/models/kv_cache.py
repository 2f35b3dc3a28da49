"""What a decoder keeps between the forwards of generation: each layer's keys and values, and which
of the positions seen so far hold real tokens.

A batch of prompts of different lengths is padded on the left; a layout that splits the sequence
(sequence parallelism) may also pad a step's new token with fillers after it. Padding and fillers
are positions that hold no token: no query attends to them, and the tokens after them keep the
positions they would have without them (``positions`` counts real tokens only). The generation loop
calls ``extend`` before each forward; the model reads ``positions`` and ``mask`` and stores its keys
and values, per layer, in ``update`` (a Hugging Face model in ``library``, the library's own cache).
"""

from __future__ import annotations

from typing import Optional

import torch


class DecodingCache:
    """The keys and values of every position a batch has seen, and which of them hold tokens."""

    def __init__(self) -> None:
        self.valid: Optional[torch.Tensor] = None  # [batch, seen] bool: True where a token is
        self.positions: Optional[torch.Tensor] = None  # [batch, new]: each new token's position in its sequence
        self.mask: Optional[torch.Tensor] = None  # [batch, 1, new, seen] bool, or None: plain causal attention
        self.layers: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.library = None  # a Hugging Face model's cache object (transformers' DynamicCache)
        # the one position whose logits the loop reads (None: every position's): a model may compute
        # only that one's, as transformers' generate asks for the prompt's last (logits_to_keep=1)
        self.logits_at: Optional[int] = None

    @property
    def seen(self) -> int:
        return 0 if self.valid is None else self.valid.shape[1]

    def extend(self, valid: torch.Tensor) -> None:
        """The next forward's positions: ``valid`` [batch, new] says which of them hold a token."""
        past = self.seen
        self.valid = valid if self.valid is None else torch.cat([self.valid, valid], dim=1)
        self.positions = (self.valid.long().cumsum(dim=1) - 1)[:, past:].clamp(min=0)
        new, total = valid.shape[1], self.valid.shape[1]
        if bool(self.valid.all()) and (past == 0 or new == 1):
            self.mask = None  # every key is a token: causal attention needs no mask
            return
        query = torch.arange(past, total, device=valid.device)[:, None]
        key = torch.arange(total, device=valid.device)[None, :]
        mask = (key <= query)[None] & self.valid[:, None, :]
        # a position without a token attends to itself alone: no row of the attention is empty
        # (an empty row is NaN, and NaN in a value that is never attended still poisons a sum)
        self.mask = (mask | (key == query)[None])[:, None]

    def update(self, layer: str, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer``'s keys and values [batch, new, heads, head_dim] appended to those it holds;
        returns all of them."""
        if layer in self.layers:
            old_key, old_value = self.layers[layer]
            key, value = torch.cat([old_key, key], dim=1), torch.cat([old_value, value], dim=1)
        self.layers[layer] = (key, value)
        return key, value
