"""Corpora the data tests prepare: Python's help text as a .txt (its paragraphs are the documents),
a tokenizer trained on it, and a prepared corpus of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from framework.data.prepare import PrepareSettings, prepare
from framework.data.token_shards import read_index


def help_text(directory: Path, name: str = "help.txt", topics_slice: slice = slice(None)) -> Path:
    """Python's help topics (some of them), as one text file of blank-line separated documents."""
    from pydoc_data.topics import topics

    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)[topics_slice]), encoding="utf-8")
    return path


def bpe_tokenizer(directory: Path, vocab_size: int = 384) -> Path:
    """A byte-level BPE tokenizer with an end-of-text token, trained on the help text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([help_text(directory, "train_tokenizer.txt").read_text()], trainer)
    path = Path(directory) / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def prepared_help(directory: Path, **settings) -> Path:
    """The help text prepared into ``directory/corpus`` (UTF-8 bytes unless a tokenizer is given)."""
    output = Path(directory) / "corpus"
    prepare(PrepareSettings(input=[str(help_text(directory))], output=str(output), workers=1, **settings))
    return output


def stream(directory: Path, split: str = "train") -> np.ndarray:
    """A prepared split's tokens, its shards read whole one after another."""
    index = read_index(directory)
    parts = [np.fromfile(Path(directory) / s["file"], dtype=index["dtype"]) for s in index["splits"][split]]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=index["dtype"])
