"""Tokenizer files: a ``tokenizers`` JSON file, or a model directory (``pkg://`` too) that holds one,
loaded with its own padding and truncation off. No torch here: ``framework-prepare-data``'s workers
load tokenizers through it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from framework.config.package_paths import resolve_path


def tokenizer_file(tokenizer: str) -> Path:
    """A ``tokenizers`` JSON file, or a model directory (``pkg://`` too) holding its ``tokenizer.json``."""
    path = resolve_path(tokenizer)
    return path / "tokenizer.json" if path.is_dir() else path


def load_tokenizer(tokenizer: str):
    """The tokenizer, its own padding and truncation off (the datamodule cuts and pads)."""
    from tokenizers import Tokenizer

    loaded = Tokenizer.from_file(str(tokenizer_file(tokenizer)))
    loaded.no_padding()
    loaded.no_truncation()
    return loaded


def tokenizer_problems(tokenizer: Optional[str]) -> list[str]:
    """``tokenizer`` names a tokenizers JSON file, or a directory that holds one."""
    try:
        found = tokenizer_file(tokenizer).is_file() if tokenizer else True
    except FileNotFoundError as err:
        return [f"tokenizer: {err}"]
    return (
        []
        if found
        else [
            f"tokenizer: no tokenizer file at '{tokenizer}' (a tokenizers JSON file, or a model "
            "directory holding tokenizer.json; null: bytes)"
        ]
    )
