"""``datamodule=instructions``: instruction data (``{prompt, response}`` or ``{messages}``, in ``.jsonl``,
``.parquet`` or a ``datasets`` directory) for fine-tuning a language model with the loss on the
responses only (framework/data/chat.py renders and masks each example).

``pack=true`` packs whole examples one after another into windows of ``seq_len`` tokens, each with its
tokens' positions restarting at every example (the model attends within an example only); ``false``
gives each example a row of its own, padded to the batch's longest. An example longer than a window
loses its earliest prompt tokens first; a response that still does not fit is cut at its end, and
every cut is counted and logged (``truncated`` and ``responses_cut``). The default data ships with
the framework (instructions.jsonl in framework/data/assets/, built from Python's own text).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from framework.config.errors import ConfigError
from framework.data.batched import GatheringTensorDataset
from framework.data.chat import EXAMPLES, encode_example, messages_of
from framework.data.conversations import IGNORE, ConversationsDataModule, fit_window, shifted, system_tokens

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).resolve().parent / "assets" / "instructions.jsonl"


def pack(examples: list[tuple[list, list]], seq_len: int, pad: int) -> GatheringTensorDataset:
    """Whole examples (inputs, targets) one after another in windows of ``seq_len``, each window's rest
    padding; positions restart at every example (and at the padding)."""
    windows, current = [], ([], [], [])
    for inputs, targets in examples:
        if current[0] and len(current[0]) + len(inputs) > seq_len:
            windows.append(current)
            current = ([], [], [])
        current[0].extend(inputs)
        current[1].extend(targets)
        current[2].extend(range(len(inputs)))
    if current[0]:
        windows.append(current)
    rows = [
        (i + [pad] * (seq_len - len(i)), t + [IGNORE] * (seq_len - len(t)), p + list(range(seq_len - len(p))))
        for i, t, p in windows
    ]
    return GatheringTensorDataset(*(torch.tensor([r[k] for r in rows], dtype=torch.long) for k in range(3)))


class Examples(Dataset):
    """One example a row, (inputs, targets) of its own length (``PadCollate`` pads a batch)."""

    def __init__(self, examples: list[tuple[list, list]]):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int):
        inputs, targets = self.examples[i]
        return torch.tensor(inputs, dtype=torch.long), torch.tensor(targets, dtype=torch.long)


class PadCollate:
    """A batch of rows padded on the right to its longest (a multiple of 8), the padding never a target."""

    def __init__(self, pad: int):
        self.pad = pad

    def __call__(self, rows):
        width = -(-max(len(inputs) for inputs, _ in rows) // 8) * 8
        inputs = torch.full((len(rows), width), self.pad, dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for k, (i, t) in enumerate(rows):
            inputs[k, : len(i)], targets[k, : len(t)] = i, t
        return [inputs, targets]


class InstructionsDataModule(ConversationsDataModule):
    """Batches of (inputs, targets[, positions]) [batch, seq_len], targets -100 but on the responses;
    ``batch_size`` windows (or examples) per global batch."""

    targets = "next tokens"
    ROWS, SHIPPED = EXAMPLES, SHIPPED

    def __init__(
        self,
        path: Optional[str] = None,
        tokenizer: Optional[str] = None,
        template: Optional[str] = None,
        system: Optional[str] = None,
        batch_size: int = 8,
        seq_len: int = 256,
        pack: bool = True,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        split_seed: int = 0,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        predict_prompts: Sequence[str] = (),
        predict_file: Optional[str] = None,
    ):
        super().__init__(path, tokenizer, template, system, batch_size, seq_len, val_fraction, test_fraction,
                         split_seed, num_workers, vocab_size, predict_prompts, predict_file)  # fmt: skip
        self.packed = pack

    @classmethod
    def train_samples(cls, pack: bool = True, **options) -> Optional[int]:
        """The training samples: one a row; packed, windows, known once the rows are encoded (None here;
        ``train_rows`` bounds them: a window holds one example at least)."""
        return None if pack else cls.train_rows(**options)

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        examples = self._encoded(self._rows())
        parts = self._splits(examples)
        if stage == "fit" and parts[2]:
            self._check_trainable(parts[2], examples)
        val, test, train = ([examples[i] for i in part] for part in parts)
        build = (lambda rows: pack(rows, self.seq_len, self.codec.pad)) if self.packed else Examples
        self.train_set, self.val_set, self.test_set = (build(rows) if rows else None for rows in (train, val, test))
        self._set_prompts()

    def _encoded(self, rows: list[dict]) -> list[tuple[list, list]]:
        """Each row as (inputs, targets) within a window; the cuts counted (``cuts``: each example's,
        ``longest``: the longest example's tokens) and logged."""
        eos = next(iter(self.codec.special["eos"]), None)
        out, self.cuts, self.longest = [], [], 0
        for row in rows:
            ids, trained = encode_example(self.renderer, self.codec, messages_of(row, self.system), eos)
            self.longest = max(self.longest, len(ids) - 1)
            ids, trained, cut = fit_window(ids, trained, self.seq_len + 1)
            self.cuts.append(cut)
            out.append(shifted(ids, trained))
        truncated, cut = sum(map(bool, self.cuts)), self.cuts.count("response")
        self.counts = {"examples": len(rows), "truncated": truncated, "responses_cut": cut}
        if truncated:  # (a warning: on the console too, whatever the run's verbosity: rank/logs.py)
            log.warning(
                "datamodule: %d of %d examples longer than seq_len=%d lost their earliest prompt tokens; %d of "
                "them lost their whole prompt and their response's end too (the longest is %d tokens: raise "
                "datamodule.seq_len to keep them whole)",
                *(truncated, len(rows), self.seq_len, cut, self.longest),
            )
        return out

    def _check_trainable(self, train: list[int], examples: list[tuple[list, list]]) -> None:
        """Refuse a training split left with nothing to learn from once fitted into windows: no response
        token counted, or every example cut down to its response's start (its prompt all gone)."""
        counted = any(t != IGNORE for i in train for t in examples[i][1])
        if counted and any(self.cuts[i] != "response" for i in train):
            return
        why = "loses its whole prompt and its response's end" if counted else "keeps no token of a response"
        system = system_tokens(self.renderer, self.codec, self.system) if self.system else None
        within = f", datamodule.system's turn {system} of them" if system else ""
        raise ConfigError(
            [
                f"datamodule.seq_len: nothing to train on: each of the {len(train)} training examples {why} in a "
                f"window of seq_len={self.seq_len} tokens (the longest is {self.longest} tokens{within}); raise "
                "datamodule.seq_len" + (" or shorten datamodule.system" if system else "")
            ]
        )

    def _loader(self, dataset, shuffle: bool) -> Optional[DataLoader]:
        loader = super()._loader(dataset, shuffle)
        if loader is None or not isinstance(dataset, Examples):
            return loader
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, collate_fn=PadCollate(self.codec.pad))
