"""A checkpoint directory's files: finding it, its manifest, and the checks that it is whole.

No torch here: validation checks ``ckpt_path`` with these before any process starts.

Every checkpoint ends with ``manifest.json`` (written last, before the commit rename): the
step, epoch, strategy and world size that saved it, and each file with its size. A file that
is missing or has another size makes the checkpoint "incomplete or corrupted", named as such.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from framework.config.errors import InputError

log = logging.getLogger(__name__)

TRAINER_FILE = "trainer.pt"
MANIFEST = "manifest.json"


class CheckpointError(InputError, RuntimeError):
    """A checkpoint that cannot be used, with the file and the reason."""


def remove_entry(path: Path) -> None:
    """Remove ``path``, whatever it is: a link is unlinked, never followed (a planted
    ``.tmp-last`` link must not take a save, or its removal, outside the run)."""
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
    except FileNotFoundError:
        pass


def outside(path: Path, directory: Path) -> bool:
    """Whether ``path``, its links followed, lies outside ``directory``."""
    return Path(directory).resolve() not in Path(path).resolve().parents


def is_checkpoint(path: Path) -> bool:
    return (path / ".metadata").is_file() and (path / TRAINER_FILE).is_file()


def resolve_ckpt_path(value: str, output_dir: str, directory: str | None = None) -> Path:
    """``last`` / ``best`` -> <directory, default output_dir/checkpoints>/<value>; anything else is a
    path. A save interrupted between its two renames left the previous checkpoint as
    ``.old-<name>``: it is used when ``<name>`` itself is missing."""
    home = Path(directory) if directory else Path(output_dir) / "checkpoints"
    path = home / value if value in ("last", "best") else Path(value)
    previous = path.parent / f".old-{path.name}"
    if not path.exists() and is_checkpoint(previous):
        return previous
    return path


def saved_step(path: Path):
    """The step a committed checkpoint at ``path`` was saved at (None: there is none)."""
    try:
        return json.loads((path / MANIFEST).read_text()).get("step")
    except (OSError, ValueError):
        return None


def crc32(path: Path) -> int:
    value = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            value = zlib.crc32(chunk, value)
    return value


def write_manifest(path: Path, **about) -> None:
    """Record every file under ``path`` with its size and CRC-32, and ``about`` (step, strategy, ...).
    The files were just written, so reading them back comes from the page cache."""
    files = [p for p in sorted(path.rglob("*")) if p.is_file()]
    with open(path / MANIFEST, "w") as f:
        json.dump(
            {
                **about,
                "files": {str(p.relative_to(path)): p.stat().st_size for p in files},
                "crc32": {str(p.relative_to(path)): crc32(p) for p in files},
            },
            f,
            indent=1,
        )


def verify_checkpoint(path: Path, contents: bool = False) -> list[str]:
    """Why the checkpoint directory ``path`` is not whole (empty: it is): missing files and sizes,
    and with ``contents`` every file's CRC-32 (reads the whole checkpoint)."""
    if not path.is_dir():
        return [f"no checkpoint at '{path}'"]
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return [f"checkpoint '{path}' has no {MANIFEST} (a save that did not finish, or not a checkpoint)"]
    except ValueError as err:
        return [f"checkpoint '{path}': {MANIFEST} is corrupted ({err})"]
    saved = (
        f"saved at step {manifest.get('step')} by strategy={manifest.get('strategy')} with "
        f"{manifest.get('world_size')} rank(s)"
    )
    problems = []
    for name, size in manifest.get("files", {}).items():
        file = path / name
        if not file.is_file():
            problems.append(f"checkpoint '{path}' is incomplete: {name} ({size} bytes) is missing ({saved})")
        elif file.stat().st_size != size:
            problems.append(
                f"checkpoint '{path}' is corrupted: {name} has {file.stat().st_size} bytes, "
                f"{size} were written ({saved})"
            )
        elif contents and name in manifest.get("crc32", {}) and crc32(file) != manifest["crc32"][name]:
            problems.append(
                f"checkpoint '{path}' is corrupted: the contents of {name} changed since it was "
                f"written (CRC-32 mismatch; {saved})"
            )
    return problems


def size_written(path: Path, name: str) -> int | None:
    """The size the manifest of the checkpoint ``path`` records for its file ``name`` (None: unknown)."""
    try:
        return json.loads((path / MANIFEST).read_text()).get("files", {}).get(name)
    except (OSError, ValueError):
        return None


def changed_contents(path: Path, name: str) -> str | None:
    """One file of the checkpoint ``path`` whose contents differ from its manifest's CRC-32 (a flipped
    byte: its size is the same), said as damage; None when it matches or nothing says."""
    try:
        crc = json.loads((path / MANIFEST).read_text()).get("crc32", {}).get(name)
    except (OSError, ValueError):
        return None
    if crc is None or not (path / name).is_file() or crc32(path / name) == crc:
        return None
    return f"checkpoint '{path}' is corrupted: the contents of {name} changed since it was written (CRC-32 mismatch)"


@dataclass(frozen=True)
class CkptPath:
    """A run's ``ckpt_path`` (``last``, ``best`` or a directory) and the checkpoint it resolves to."""

    value: Any
    output_dir: Any

    @property
    def path(self) -> Path:
        return resolve_ckpt_path(str(self.value), str(self.output_dir))

    def problems(self) -> list[str]:
        """Problems with ``ckpt_path`` found before any process starts. ``last`` in a directory that
        has none is not one: the run starts fresh (a requeued job can always pass it)."""
        value = self.value
        if value is None:
            return []
        path = self.path
        if value in ("last", "best") and path.is_symlink() and outside(path, path.parent):
            return [
                f"ckpt_path: {path} is a link to '{os.readlink(path)}', outside the run's checkpoints; refused "
                "(the framework's own last and best never point outside it): remove the link, or name the "
                "checkpoint directory itself"
            ]
        if value == "last" and not path.exists():
            return []
        if not path.exists() or not (is_checkpoint(path) or (path / MANIFEST).exists()):
            return [self._missing(path)]
        return [f"ckpt_path: {problem}" for problem in verify_checkpoint(path)]

    def _missing(self, path: Path) -> str:
        hint = (
            (
                " (ckpt_path=last|best look in this run's checkpoints/; to resume another run, pass its "
                "checkpoint directory, or rerun in its directory with hydra.run.dir=<that run>)"
            )
            if self.value == "best"
            else ""
        )
        return (
            f"ckpt_path: no checkpoint at '{path}'; a checkpoint is a directory holding .metadata, "
            f"{TRAINER_FILE} and {MANIFEST}{hint}"
        )


def remove_leftovers(directory: Path) -> None:
    """Delete what interrupted saves left in a checkpoint directory: ``.tmp-*`` (never committed)
    and ``.old-*`` whose successor is in place; and links under the names the framework writes
    that it never makes (``.tmp-*``, ``.old-*``, a ``last`` pointing outside): a save never writes
    through them."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        planted = entry.is_symlink() and (
            entry.name.startswith((".tmp-", ".old-")) or (entry.name == "last" and outside(entry, directory))
        )
        stale = entry.name.startswith(".tmp-") or (
            entry.name.startswith(".old-") and is_checkpoint(directory / entry.name[len(".old-") :])
        )
        if planted:
            log.warning(
                "Removing the link %s -> %s: the framework writes a checkpoint there, never through a link",
                entry,
                os.readlink(entry),
            )
            entry.unlink()
        elif stale and entry.is_dir():
            log.info("Removing %s, left by an interrupted save", entry)
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name == ".best-link" and entry.is_symlink():
            os.unlink(entry)
