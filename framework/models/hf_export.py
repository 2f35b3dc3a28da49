"""A model back in the Hugging Face format: a directory ``from_pretrained`` loads (config.json,
model.safetensors under the library's own parameter names, and the tokenizer files and generation
config of the directory the model came from)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Optional

import torch

log = logging.getLogger(__name__)
MANIFEST = ".export.json"  # the files an export wrote: a second export replaces these, and keeps the rest

# what the export takes along from the directory the model came from
SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
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
    replace_export(tmp, directory, source)


def replace_export(tmp: Path, directory: Path, source: Optional[Path]) -> None:
    """An export written in ``tmp`` (with the source's tokenizer files and a manifest of its files) put
    in ``directory``'s place by a rename; a file of the user's there is kept."""
    for name in SOURCE_FILES if source is not None else ():
        if (source / name).is_file():
            shutil.copy2(source / name, tmp / name)
    ours = sorted(p.name for p in tmp.iterdir())
    (tmp / MANIFEST).write_text(json.dumps({"files": ours}))
    kept = _keep_foreign(directory, tmp, set(ours))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
    if kept:
        log.warning("%s: kept %s, not written by an export (the export replaced only its own files)", directory, kept)


def _keep_foreign(directory: Path, new: Path, ours: set[str]) -> list[str]:
    """Move into ``new`` what ``directory`` holds that no export wrote (a file of the user's): an
    export replaces its own files only. An export's files are those its manifest lists, or, from an
    export that wrote none, those this one writes."""
    if not directory.is_dir():
        return []
    listed = directory / MANIFEST
    earlier = set(json.loads(listed.read_text()).get("files", [])) if listed.is_file() else set()
    foreign = [p for p in sorted(directory.iterdir()) if p.name not in ours | earlier | {MANIFEST}]
    for path in foreign:
        os.replace(path, new / path.name)
    return [p.name for p in foreign]


def remove_export(directory: Path) -> list[str]:
    """Remove what an export wrote into ``directory`` (its manifest's files; an export's usual files
    where it has none), the directory too once empty; the names of the files kept (the user's)."""
    listed = directory / MANIFEST
    ours = set(json.loads(listed.read_text()).get("files", [])) if listed.is_file() else set()
    ours |= {MANIFEST} | ({"config.json", "model.safetensors", *SOURCE_FILES} if not listed.is_file() else set())
    kept = []
    for path in sorted(directory.iterdir()):
        if path.name in ours:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        else:
            kept.append(path.name)
    if not kept:
        directory.rmdir()
    return kept
