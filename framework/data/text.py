"""Text for language modelling: a corpus cut into fixed-length windows of tokens, split by a
fixed seed into train/val/test; prompts to continue for the predict loop.

Tokens are the text's UTF-8 bytes (256 of them, no tokenizer file), or a ``tokenizers`` JSON file's
ids when ``tokenizer`` names one. The default corpus ships with Python itself: the text of the
help topics in ``pydoc_data.topics`` (about 466 KB of English, PSF licence), so nothing is
downloaded. ``data_dir``: a ``.txt`` file, or a folder whose ``.txt`` files are read in name order.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch.utils.data import DataLoader

from framework.config.ranges import Range
from framework.data.base import BaseDataModule, split_dataset
from framework.data.batched import GatheringTensorDataset
from framework.data.prompts import PromptsToContinue, prompt_set, read_prompts
from framework.data.tokenizer_files import TokenizerFile, load_tokenizer, special_tokens


def builtin_corpus() -> str:
    """Python's help topics, in name order (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def read_corpus(data_dir: Optional[str]) -> str:
    if not data_dir:
        return builtin_corpus()
    path = Path(data_dir)
    files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
    return "\n\n".join(f.read_text(encoding="utf-8") for f in files)


class Codec:
    """Text <-> token ids: UTF-8 bytes, or a ``tokenizers`` tokenizer (a file, or a model's directory,
    whose files also name its special tokens: ``special``, framework/data/tokenizer_files.py)."""

    def __init__(self, tokenizer: Optional[str] = None):
        self.tokenizer = load_tokenizer(tokenizer) if tokenizer else None
        self.special = special_tokens(tokenizer, self.tokenizer)

    @classmethod
    def problems(cls, tokenizer: Optional[str], vocab_size) -> list[str]:
        """Before start: ``tokenizer`` reads, and ``vocab_size`` (when given) is its count of tokens; keyed
        relative to the datamodule."""
        unreadable = TokenizerFile(tokenizer).problems()
        if unreadable:
            return unreadable
        try:
            tokens = cls(tokenizer).vocab_size
        except Exception as err:  # noqa: BLE001 - the tokenizers library raises its own exception types
            return [f"tokenizer: '{tokenizer}' is not a tokenizers JSON file ({str(err).splitlines()[0]})"]
        if isinstance(vocab_size, int) and vocab_size != tokens:
            return [
                f"vocab_size: {vocab_size}, but the tokens number {tokens} "
                f"({f'the tokenizer {tokenizer}' if tokenizer else 'UTF-8 bytes'}); set datamodule.vocab_size={tokens}"
            ]
        return []

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size() if self.tokenizer else 256

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids if self.tokenizer else list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids]
        return self.tokenizer.decode(ids) if self.tokenizer else bytes(ids).decode("utf-8", errors="replace")

    def continuation(self, ids: Sequence[int]) -> list[int]:
        """Generated ``ids`` up to their first end-of-sequence token (left out)."""
        ids, eos = [int(i) for i in ids], set(self.special["eos"])
        return next((ids[:i] for i, t in enumerate(ids) if t in eos), ids)

    @property
    def pad(self) -> int:
        """The id padding holds: the tokenizer's pad token, else its end of sequence, else 0."""
        return next(iter([self.special["pad"]] if self.special["pad"] is not None else self.special["eos"]), 0)


def unigram_entropy(tokens: Sequence[int]) -> float:
    """The entropy of the tokens' frequencies, in nats per token: the loss of the best model that
    ignores context (a language model should end well below it)."""
    counts, n = Counter(tokens), len(tokens)
    return -sum(c / n * math.log(c / n) for c in counts.values())


class TextDataModule(PromptsToContinue, BaseDataModule):
    """Windows of ``seq_len + 1`` tokens (inputs, and the same shifted by one as targets), one after
    another through the corpus; ``batch_size`` windows per global batch. ``predict_prompts``: texts
    whose continuations the predict loop generates (framework/tasks/generation.py); ``predict_file``,
    when given, replaces them (a .txt of one prompt per line, or a .jsonl of {"prompt": ...})."""

    inputs, targets = "token ids", "next tokens"  # what the checks before start match against model and task

    argument_ranges = {"seq_len": Range(low=2)}

    def __init__(
        self,
        batch_size: int = 32,
        seq_len: int = 128,
        data_dir: Optional[str] = None,
        tokenizer: Optional[str] = None,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        split_seed: int = 0,
        num_workers: int = 0,
        predict_prompts: Sequence[str] = ("The ",),
        vocab_size: Optional[int] = None,
        predict_file: Optional[str] = None,
    ):
        super().__init__(batch_size, num_workers)
        self.seq_len, self.data_dir, self.split_seed = seq_len, data_dir, split_seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.codec = Codec(tokenizer)
        if vocab_size is not None and vocab_size != self.codec.vocab_size:
            raise ValueError(
                f"datamodule.vocab_size: {vocab_size}, but the tokens number {self.codec.vocab_size} "
                f"({'the tokenizer' if tokenizer else 'bytes'}); set datamodule.vocab_size={self.codec.vocab_size}"
            )
        self.predict_prompts = read_prompts(predict_file) or list(predict_prompts)

    @property
    def vocab_size(self) -> int:
        return self.codec.vocab_size

    @classmethod
    def check_config(
        cls,
        data_dir: Optional[str] = None,
        tokenizer: Optional[str] = None,
        vocab_size: Optional[int] = None,
        seq_len: int = 128,
        val_fraction: float = 0.05,
        test_fraction: float = 0.05,
        predict_file: Optional[str] = None,
        **_,
    ) -> list[str]:
        problems = cls.prompt_file_problems(predict_file)
        if data_dir and not Path(data_dir).exists():
            problems.append(f"data_dir: nothing at '{data_dir}' (a .txt file, or a folder of .txt files)")
        elif data_dir and Path(data_dir).is_dir() and not any(Path(data_dir).glob("*.txt")):
            problems.append(f"data_dir: '{data_dir}' holds no .txt file")
        else:
            problems += cls._window_problems(data_dir, seq_len, val_fraction, test_fraction)
        return problems + Codec.problems(tokenizer, vocab_size)

    @classmethod
    def _window_problems(cls, data_dir: Optional[str], seq_len, val_fraction, test_fraction) -> list[str]:
        """Too little text for the windows and splits asked for, counted in bytes: a token is at least
        a byte, so a corpus too short in bytes is too short in any tokenizer's tokens."""
        if not isinstance(seq_len, int) or seq_len < 2:
            return []  # the range check names it
        if data_dir:
            path = Path(data_dir)
            files = sorted(path.glob("*.txt")) if path.is_dir() else [path]
            size = sum(f.stat().st_size for f in files) + 2 * (len(files) - 1)
        else:
            size = len(builtin_corpus().encode("utf-8"))
        windows = (size - 1) // seq_len
        if windows < 1:
            return [
                f"seq_len: the corpus has {size} bytes, not enough for one window of {seq_len} tokens "
                f"(and its next token); use a shorter seq_len or more text"
            ]
        return [
            f"{p} (the corpus makes at most {windows} windows of seq_len={seq_len})"
            for p in cls.split_problems(windows, val_fraction, test_fraction)
        ]

    def setup(self, stage: str) -> None:
        if self.predict_set is None:
            self.predict_set = prompt_set(self.codec, self.predict_prompts)
        if self.train_set is not None or stage == "predict":  # (prediction reads no corpus)
            return
        tokens = torch.tensor(self.codec.encode(read_corpus(self.data_dir)), dtype=torch.long)
        windows = (len(tokens) - 1) // self.seq_len
        problems = self.split_problems(windows, self.val_fraction, self.test_fraction)
        if windows < 1 or problems:
            raise ValueError(
                f"datamodule: {len(tokens)} tokens make {windows} windows of seq_len={self.seq_len}; "
                + ("; ".join(problems) or "use a shorter seq_len or more text")
            )
        cut = tokens[: windows * self.seq_len + 1]
        inputs = cut[:-1].view(windows, self.seq_len)
        targets = cut[1:].view(windows, self.seq_len)
        self.val_set, self.test_set, self.train_set = split_dataset(
            GatheringTensorDataset(inputs, targets), [self.val_fraction, self.test_fraction], self.split_seed
        )

    def predict_dataloader(self) -> Optional[DataLoader]:
        return self._loader(self.predict_set, shuffle=False)
