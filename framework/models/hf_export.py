"""A model back in the Hugging Face format: a directory ``from_pretrained`` loads (config.json,
model.safetensors under the library's own parameter names, and the tokenizer files and generation
config of the directory the model came from)."""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from framework.config.errors import ConfigError

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
# every name an export may write (the model's or the adapters' files, the source's): a file of the
# user's under one of these names is refused rather than overwritten
EXPORT_FILES = frozenset(
    {"config.json", "model.safetensors", "adapter_config.json", "adapter_model.safetensors", MANIFEST, *SOURCE_FILES}
)


def write_directory(directory: Path, hf_config, weights: dict[str, torch.Tensor], source: Optional[Path]) -> None:
    """Write the export into ``directory`` (a folder beside it first: never half an export)."""
    from safetensors.torch import save_file

    tmp = fresh_folder(directory)
    hf_config.save_pretrained(str(tmp))
    # one tensor per name, each its own contiguous storage (safetensors refuses shared ones)
    save_file(
        {k: v.detach().contiguous().clone() for k, v in weights.items()},
        str(tmp / "model.safetensors"),
        metadata={"format": "pt"},
    )
    replace_export(tmp, directory, source)


def fresh_folder(directory: Path) -> Path:
    """An empty folder beside ``directory`` to write an export into (an earlier one's leftovers
    removed: only ever the export's own files, as nothing else is moved into it; a link there is
    removed, never followed)."""
    tmp = directory.with_name(f".{directory.name}.tmp")
    if tmp.is_symlink() or tmp.is_file():
        tmp.unlink()
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def replace_export(tmp: Path, directory: Path, source: Optional[Path]) -> None:
    """An export written in ``tmp`` (with the source's tokenizer files and a manifest of its files) put
    in ``directory``'s place. Nothing of the user's there is moved or replaced: an empty directory, or
    one of an earlier export's files alone, is swapped by a rename; one that holds files of the
    user's too gets the export's files one by one (the manifest last), the user's left where they
    are. A link, or a file of the user's under a name the export writes, is refused
    (``ExportDirectory.problems``, before start too)."""
    for name in SOURCE_FILES if source is not None else ():
        if (source / name).is_file():
            shutil.copy2(source / name, tmp / name)
    ours = sorted(p.name for p in tmp.iterdir())
    problems = ExportDirectory(directory).problems("export")
    if problems:
        shutil.rmtree(tmp)
        raise ExportRefused(problems)
    (tmp / MANIFEST).write_text(json.dumps({"files": ours}))
    earlier = ExportDirectory(directory).earlier_files()
    foreign = [p.name for p in directory.iterdir() if p.name not in earlier | {MANIFEST}] if directory.is_dir() else []
    if not foreign:
        _swap(tmp, directory)
        return
    for name in ours:  # each file atomically in place; the user's files stay untouched
        os.replace(tmp / name, directory / name)
    for name in earlier - set(ours):  # what the earlier export wrote and this one did not
        _remove(directory / name)
    os.replace(tmp / MANIFEST, directory / MANIFEST)  # last: the export is whole
    tmp.rmdir()
    log.warning("%s: kept %s, not written by an export (the export replaced only its own files)", directory, foreign)


def _swap(tmp: Path, directory: Path) -> None:
    """``tmp`` in the place of ``directory`` (absent, or holding an earlier export's files alone)."""
    if not directory.exists():
        os.replace(tmp, directory)
        return
    old = directory.with_name(f".{directory.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(directory, old)
    os.replace(tmp, directory)
    shutil.rmtree(old)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


class ExportRefused(ConfigError):
    """An export that would touch what the run did not write (found when the export is written: the
    same check as before start, for a link made during training)."""


@dataclass(frozen=True)
class ExportDirectory:
    """The directory an export writes (a run's ``model_hf/``), with what an earlier export wrote there."""

    path: Path

    def earlier_files(self) -> set[str]:
        """The files an earlier export wrote into the directory: those its manifest lists (a directory
        without one holds no export's files: everything there is the user's)."""
        listed = self.path / MANIFEST
        if not listed.is_file() or listed.is_symlink():
            return set()
        try:
            files = json.loads(listed.read_text()).get("files", [])
        except (OSError, ValueError, AttributeError):
            return set()
        return {str(name) for name in files if isinstance(name, str) and Path(name).name == name}

    def problems(self, key: str = "export_format") -> list[str]:
        """Why an export may not write into the directory (a run's ``model_hf/``): a link (there, or a
        file of it), or a file of the user's under a name an export writes (``EXPORT_FILES``: it would
        be overwritten). Files an earlier export wrote (its manifest) are replaced; any other file stays."""
        directory = self.path
        if directory.is_symlink():
            return [
                f"{key}: {directory} is a link (to {os.readlink(directory)}): an export writes only into a directory "
                "of the run's own; remove the link (the export creates the directory) or choose another output_dir"
            ]
        if not directory.exists():
            return []
        if not directory.is_dir():
            return [f"{key}: {directory} is a file, not the directory an export writes; move it away"]
        earlier = self.earlier_files()
        links = sorted(p.name for p in directory.iterdir() if p.is_symlink())
        clashes = sorted(p.name for p in directory.iterdir() if p.name in EXPORT_FILES - earlier - {MANIFEST})
        problems = [f"{key}: {directory} holds links ({', '.join(links)}); an export replaces no link: remove them"]
        problems = problems if links else []
        if clashes:
            problems.append(
                f"{key}: {directory} holds {', '.join(clashes)} of your own (not written by an export), which the "
                "export would overwrite; move them out of the directory, or choose another output_dir"
            )
        return problems


def remove_export(directory: Path) -> list[str]:
    """Remove what an export wrote into ``directory`` (its manifest's files), the directory too once
    empty; the names of the files kept (the user's). A link is removed itself, never followed."""
    if directory.is_symlink():
        directory.unlink()
        return []
    ours = ExportDirectory(directory).earlier_files() | {MANIFEST}
    kept = []
    for path in sorted(directory.iterdir()):
        if path.name in ours and not path.is_symlink():
            _remove(path)
        else:
            kept.append(path.name)
    if not kept:
        directory.rmdir()
    return kept
