"""The config's own interpolation: ``${framework.prepared_vocab_size:<dir>}``, the vocabulary size a
prepared corpus's index records, so that ``datamodule=tokens`` and the model it feeds
(``vocab_size: ${datamodule.vocab_size}``) read it from the corpus, not from the user; and
``${framework.model_tokenizer:<model.path>}`` / ``${framework.model_vocab_size:<model.path>}``, the
tokenizer of a Hugging Face model and its count of tokens, which a text datamodule's ``tokenizer`` and
``vocab_size`` follow unless set. Registered when the config package is imported (every entry point
and rank imports it)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf

from framework.config.package_paths import is_gguf_file, model_directory, resolve_path

BYTES = 256  # the vocabulary without a tokenizer: UTF-8 bytes


def prepared_vocab_size(directory) -> Optional[int]:
    """The ``vocab_size`` of ``<directory>/index.json`` (of several corpora mixed, the largest); None
    when there is none (the datamodule's check names the path)."""
    if not isinstance(directory, (str, Path)) and hasattr(directory, "__iter__"):
        sizes = [prepared_vocab_size(d) for d in directory]
        return max(sizes) if sizes and None not in sizes else None
    try:
        size = json.loads((Path(str(directory)) / "index.json").read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) else None


def model_tokenizer(model_path) -> Optional[str]:
    """``model.path`` when the model holds a tokenizer (a GGUF file, or a directory with tokenizer.json):
    the tokenizer a datamodule uses unless it names one; None (UTF-8 bytes) for any other model."""
    if not isinstance(model_path, str) or not model_path:
        return None
    try:
        holds = is_gguf_file(model_path) or (resolve_path(model_path) / "tokenizer.json").is_file()
    except FileNotFoundError:
        return None
    return model_path if holds else None


def model_vocab_size(model_path) -> Optional[int]:
    """The count of tokens of ``model_tokenizer(model_path)`` (256: bytes); None when it does not load
    (the datamodule's check names the tokenizer). A GGUF file's is its converted directory's."""
    tokenizer = model_tokenizer(model_path)
    if tokenizer is None:
        return BYTES
    try:
        file = model_directory(tokenizer) / "tokenizer.json"
        return _tokens_in(str(file), file.stat().st_mtime_ns)
    except Exception:  # noqa: BLE001 - a GGUF file that does not convert, a tokenizer that does not load
        return None


@lru_cache(maxsize=16)
def _tokens_in(file: str, modified_ns: int) -> int:
    """A tokenizers file's count of tokens, read once while it stays as it was (``modified_ns``)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(file).get_vocab_size()


def register() -> None:
    resolvers = {
        "framework.prepared_vocab_size": prepared_vocab_size,
        "framework.model_tokenizer": model_tokenizer,
        "framework.model_vocab_size": model_vocab_size,
    }
    for name, resolver in resolvers.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
