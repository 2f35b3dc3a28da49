"""``datamodule=preferences``: pairs of a chosen and a rejected answer to one prompt, for preference
tuning (``task=dpo``), in TRL's format (framework/data/preference_rows.py reads and checks them).

Each answer is rendered after its prompt as datamodule=instructions renders a conversation (the
tokenizer's chat template, or ``template``: framework/data/chat.py), and its tokens are the targets:
the prompt's, and any assistant turn inside a conversational prompt, are -100. An answer longer than a
window loses its earliest prompt tokens first, then its end (instructions.py's ``fit_window``), each cut
counted and logged. A batch of ``batch_size`` pairs is ``(inputs, targets)`` of ``2 x batch_size`` rows
padded on the right to their longest: the chosen answers first, then the rejected ones in the same
order (TRL's concatenated layout). The default data ships with the framework (preferences.jsonl in
framework/data/assets/, built by scripts/build_preferences.py from the instruction set's training split).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch.utils.data import Dataset

from framework.data.chat import encode_example
from framework.data.conversations import IGNORE, ConversationsDataModule, fit_window, shifted
from framework.data.preference_rows import PAIRS, pair_messages

log = logging.getLogger(__name__)
SHIPPED = Path(__file__).resolve().parent / "assets" / "preferences.jsonl"


class Pairs(Dataset):
    """One pair a sample: (chosen inputs, chosen targets, rejected inputs, rejected targets), each of its
    own length; ``collate`` pads a batch into TRL's concatenated layout."""

    def __init__(self, pairs: list[tuple[list, list, list, list]], pad: int):
        self.pairs, self.pad = pairs, pad

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int):
        return tuple(torch.tensor(part, dtype=torch.long) for part in self.pairs[i])

    def collate(self, samples) -> list[torch.Tensor]:
        """[inputs, targets], each [2 x pairs, width]: the chosen rows, then the rejected ones; right
        padding to the longest (a multiple of 8), never a target."""
        rows = [s[0:2] for s in samples] + [s[2:4] for s in samples]
        width = -(-max(len(inputs) for inputs, _ in rows) // 8) * 8
        inputs = torch.full((len(rows), width), self.pad, dtype=torch.long)
        targets = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for k, (i, t) in enumerate(rows):
            inputs[k, : len(i)], targets[k, : len(t)] = i, t
        return [inputs, targets]


class PreferencesDataModule(ConversationsDataModule):
    """Batches of ``batch_size`` preference pairs (per global batch): (inputs, targets) [2 x pairs,
    longest answer's tokens], targets -100 but on the answers."""

    targets = "preference pairs"
    ROWS, SHIPPED, FRACTIONS = PAIRS, SHIPPED, (0.1, 0.1)

    def __init__(
        self,
        path: Optional[str] = None,
        tokenizer: Optional[str] = None,
        template: Optional[str] = None,
        system: Optional[str] = None,
        batch_size: int = 8,
        seq_len: int = 256,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        split_seed: int = 0,
        num_workers: int = 0,
        vocab_size: Optional[int] = None,
        predict_prompts: Sequence[str] = (),
        predict_file: Optional[str] = None,
    ):
        super().__init__(path, tokenizer, template, system, batch_size, seq_len, val_fraction, test_fraction,
                         split_seed, num_workers, vocab_size, predict_prompts, predict_file)  # fmt: skip

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        pairs = self._encoded(self._rows())
        val, test, train = ([pairs[i] for i in part] for part in self._splits(pairs))
        self.train_set, self.val_set, self.test_set = (
            Pairs(rows, self.codec.pad) if rows else None for rows in (train, val, test)
        )
        self._set_prompts()

    def _encoded(self, rows: list[dict]) -> list[tuple[list, list, list, list]]:
        """Each row as (chosen inputs, targets, rejected inputs, targets) within a window; the cuts
        counted and logged."""
        eos = next(iter(self.codec.special["eos"]), None)
        out, cuts = [], []
        for row in rows:
            prompt, chosen, rejected = pair_messages(row, self.system)
            pair = []
            for answer in (chosen, rejected):
                ids, trained = encode_example(self.renderer, self.codec, prompt + answer, eos, len(prompt))
                ids, trained, cut = fit_window(ids, trained, self.seq_len + 1)
                cuts.append(cut)
                pair += shifted(ids, trained)
            out.append(tuple(pair))
        truncated, cut = sum(map(bool, cuts)), cuts.count("response")
        self.counts = {"answers": len(cuts), "truncated": truncated, "answers_cut": cut}
        if truncated:
            log.warning(
                "datamodule: %d of %d answers (%d pairs) longer than seq_len=%d lost their earliest prompt tokens; "
                "%d of them their end too (raise datamodule.seq_len to keep them whole)",
                *(truncated, len(cuts), len(rows), self.seq_len, cut),
            )
        return out
