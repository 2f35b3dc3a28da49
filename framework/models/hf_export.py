"""A model back in the Hugging Face format: a directory ``from_pretrained`` loads (config.json,
model.safetensors under the library's own parameter names, and the tokenizer files and generation
config of the directory the model came from)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

import torch

# what the export takes along from the directory the model came from
SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "generation_config.json",
)


def write_directory(directory: Path, hf_config, weights: dict[str, torch.Tensor], source: Optional[Path]) -> None:
    """Write the export into ``directory`` (a folder beside it first, then renamed: never half an export)."""
    from safetensors.torch import save_file

    tmp = directory.with_name(f".{directory.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    hf_config.save_pretrained(str(tmp))
    # one tensor per name, each its own contiguous storage (safetensors refuses shared ones)
    save_file(
        {k: v.detach().contiguous().clone() for k, v in weights.items()},
        str(tmp / "model.safetensors"),
        metadata={"format": "pt"},
    )
    for name in SOURCE_FILES if source is not None else ():
        if (source / name).is_file():
            shutil.copy2(source / name, tmp / name)
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
