"""The config's own interpolation: ``${framework.prepared_vocab_size:<dir>}``, the vocabulary size a
prepared corpus's index records, so that ``datamodule=tokens`` and the model it feeds
(``vocab_size: ${datamodule.vocab_size}``) read it from the corpus, not from the user. Registered
when the config package is imported (every entry point and rank imports it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from omegaconf import OmegaConf


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


def register() -> None:
    if not OmegaConf.has_resolver("framework.prepared_vocab_size"):
        OmegaConf.register_new_resolver("framework.prepared_vocab_size", prepared_vocab_size)
