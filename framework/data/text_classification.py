"""Labelled documents for text classification: each cut to ``seq_len`` tokens of the model's own
tokenizer (its special tokens added, padded with its padding token), split by a fixed seed.

``data_file``: a ``.jsonl`` file of ``{"text": ..., "label": ...}`` rows or a ``.csv`` file with
``text`` and ``label`` columns; labels are names (or numbers), their classes numbered in sorted
order. null: Python's own docstrings labelled by their Library Reference chapter (``docstrings``).
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path
from typing import Optional

import torch

from framework.config.ranges import Range
from framework.data.base import BaseDataModule, split_dataset
from framework.data.batched import GatheringTensorDataset
from framework.data.docstrings import labelled_docstrings
from framework.data.tokenizer_files import TokenizerFile, load_tokenizer

FORMATS = (".jsonl", ".csv")
log = logging.getLogger(__name__)


def read_documents(data_file: Optional[str]) -> list[tuple[str, str]]:
    """(text, label) pairs: the file's rows, or the built-in docstrings."""
    if not data_file:
        return list(labelled_docstrings())
    path = Path(data_file)
    with path.open(encoding="utf-8", newline="") as handle:
        rows = (
            [json.loads(line) for line in handle if line.strip()]
            if path.suffix == ".jsonl"
            else list(csv.DictReader(handle))
        )
    bad = [i + 1 for i, row in enumerate(rows) if not isinstance(row, dict) or "text" not in row or "label" not in row]
    if bad:
        raise ValueError(f"datamodule.data_file: rows {bad[:5]} of '{data_file}' lack a text or a label")
    return [(str(row["text"]), str(row["label"])) for row in rows]


class TextClassificationDataModule(BaseDataModule):
    """Batches of (token ids [batch, seq_len], class ids [batch]); ``class_names`` in id order."""

    inputs, targets = "token ids", "classes"

    argument_ranges = {"seq_len": Range(low=2)}

    def __init__(
        self,
        tokenizer: str,
        batch_size: int = 32,
        seq_len: int = 64,
        data_file: Optional[str] = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        split_seed: int = 0,
        num_workers: int = 0,
        num_classes: Optional[int] = None,
    ):
        super().__init__(batch_size, num_workers, num_classes=num_classes)
        self.seq_len, self.data_file, self.split_seed = seq_len, data_file, split_seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.tokenizer = load_tokenizer(tokenizer)
        ids = (self.tokenizer.token_to_id(token) for token in ("[PAD]", "<pad>"))
        self.pad_id = next((i for i in ids if i is not None), 0)
        self.class_names: list[str] = []

    @classmethod
    def check_config(
        cls,
        tokenizer: Optional[str] = None,
        data_file: Optional[str] = None,
        val_fraction: float = 0.1,
        test_fraction: float = 0.1,
        num_classes: Optional[int] = None,
        **_,
    ) -> list[str]:
        problems = (
            TokenizerFile(tokenizer).problems()
            if tokenizer
            else [
                "tokenizer: null; text classification needs the model's tokenizer "
                "(its directory, or a tokenizers JSON file)"
            ]
        )
        if data_file and (not Path(data_file).is_file() or Path(data_file).suffix not in FORMATS):
            problems.append(
                f"data_file: no {' or '.join(FORMATS)} file at '{data_file}' (rows of text and label; "
                "null: the built-in docstrings)"
            )
            return problems
        try:
            documents = read_documents(data_file)
        except (ValueError, OSError, UnicodeDecodeError) as err:
            return [*problems, str(err).removeprefix("datamodule.")]
        classes = sorted({label for _, label in documents})
        if isinstance(num_classes, int) and num_classes != len(classes):
            problems.append(
                f"num_classes: {num_classes}, but the data has {len(classes)} labels "
                f"({', '.join(classes[:8])}{', ...' if len(classes) > 8 else ''}); set "
                f"datamodule.num_classes={len(classes)}"
            )
        return problems + cls.split_problems(len(documents), val_fraction, test_fraction)

    def _encode(self, texts: list[str]) -> torch.Tensor:
        rows = []
        for encoding in self.tokenizer.encode_batch(texts):
            ids = encoding.ids[: self.seq_len]
            if len(encoding.ids) > self.seq_len and encoding.special_tokens_mask[-1]:
                ids[-1] = encoding.ids[-1]  # keep the closing special token ([SEP]) of a cut document
            rows.append(ids + [self.pad_id] * (self.seq_len - len(ids)))
        return torch.tensor(rows, dtype=torch.long)

    def setup(self, stage: str) -> None:
        if self.train_set is not None:
            return
        documents = read_documents(self.data_file)
        self.class_names = sorted({label for _, label in documents})
        log.info("Classes (label: name): %s", ", ".join(f"{i}: {n}" for i, n in enumerate(self.class_names)))
        self._check_shape([self.seq_len], len(self.class_names), self.data_file or "the built-in docstrings")
        labels = torch.tensor([self.class_names.index(label) for _, label in documents], dtype=torch.long)
        tokens = self._encode([text for text, _ in documents])
        self.val_set, self.test_set, self.train_set = split_dataset(
            GatheringTensorDataset(tokens, labels), [self.val_fraction, self.test_fraction], self.split_seed
        )
