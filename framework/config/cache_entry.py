"""What a cache entry holds (a GGUF file's converted directory: gguf_files.py), recorded when it is written and
verified each time it is used, so that a file changed in it (an edited config.json, a flipped byte in the
weights, a file removed or added) is found before the run reads it.

The record lists every file the entry holds with its size and SHA-256, and of a safetensors file the SHA-256
of its header too. Verifying reads the small files whole, a safetensors file's header, and the weights whole
only when their file changed since their content was last found as recorded: ``STAMP`` keeps the weights'
(size, mtime_ns, inode) of that moment, and any write to a file changes its mtime (a copy, its inode). So a
run does not read the weights twice on every start (SmolLM2's 540 MB: about 1.5 s of hashing on 2 cores);
a cache that cannot be written (no stamp) has them hashed once per process. Within a process, an entry whose
files' signatures are those already verified is not read again. No torch on import."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Optional

STAMP = "verified.json"  # the weights' signatures when their content last matched the record
WEIGHTS = ".safetensors"
_digests: dict[tuple, str] = {}
_verified: dict[str, tuple] = {}  # entry -> its files' signatures when this process last found it intact


def signature(stat: os.stat_result) -> list[int]:
    """What changes when a file is written or replaced: its size, modification time (ns) and inode."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ino]


def file_sha256(path: Path) -> str:
    """The file's SHA-256 (hex), read once per process while its size, modification time and inode stay."""
    stat = path.stat()
    key = (str(path.resolve()), *signature(stat))
    if key not in _digests:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                digest.update(block)
        _digests[key] = digest.hexdigest()
    return _digests[key]


def header_sha256(path: Path) -> Optional[str]:
    """The SHA-256 of a safetensors file's header (its 8-byte length and the JSON after it: every tensor's
    name, dtype, shape and offsets); None where the file is shorter than its header says."""
    with open(path, "rb") as f:
        length = f.read(8)
        body = f.read(int.from_bytes(length, "little")) if len(length) == 8 else b""
    if len(length) < 8 or len(body) != int.from_bytes(length, "little"):
        return None
    return hashlib.sha256(length + body).hexdigest()


def _files(directory: Path, leave_out: tuple[str, ...]) -> list[str]:
    """The files under ``directory`` (relative, sorted), but ``leave_out`` and the stamp."""
    names = (p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file() or p.is_symlink())
    return sorted(n for n in names if n not in (*leave_out, STAMP) and not n.startswith(f".{STAMP}."))


def describe(directory: Path, leave_out: tuple[str, ...] = ()) -> dict[str, dict]:
    """What ``directory`` holds, as the record keeps it: each file's size and SHA-256 (a safetensors file's
    header's too). Called as the entry is written; ``stamp`` then marks its weights as verified."""
    record = {}
    for name in _files(directory, leave_out):
        path = directory / name
        record[name] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
        if name.endswith(WEIGHTS):
            record[name]["header_sha256"] = header_sha256(path)
    return record


def damage(directory: Path, files: object, leave_out: tuple[str, ...] = ()) -> Optional[str]:
    """Why ``directory`` no longer holds what ``files`` (``describe``'s record) says, or None: a file missing,
    added, of another size or content. The weights' content is hashed only where their signature is not the
    stamp's (see the module's docstring); an entry found intact is stamped, and remembered in this process."""
    if not isinstance(files, dict) or not files:
        return "it has no record of its files: an earlier version of the framework wrote it"
    names = _files(directory, leave_out)
    seen = tuple((n, *signature((directory / n).stat())) for n in names)
    if _verified.get(str(directory)) == seen:
        return None
    missing, added = sorted(set(files) - set(names)), sorted(set(names) - set(files))
    if missing:
        return f"it lacks {', '.join(missing)}"
    if added:
        return f"it holds {', '.join(added)}, which its conversion did not write"
    stamped = _stamped(directory)
    for name in names:
        why = _file_damage(directory / name, files[name], stamped.get(name))
        if why:
            return f"{name} {why}"
    _stamp(directory, {n: signature((directory / n).stat()) for n in names if n.endswith(WEIGHTS)}, stamped)
    _verified[str(directory)] = seen
    return None


def _file_damage(path: Path, recorded: dict, stamped: Optional[list]) -> Optional[str]:
    """Why one file is not the one recorded (None: it is)."""
    stat = path.stat()
    if stat.st_size != recorded.get("size"):
        return f"is {stat.st_size:,} bytes, not the {recorded.get('size')!r} written"
    if "header_sha256" in recorded:
        if header_sha256(path) != recorded["header_sha256"]:
            return "has another header than the one written: its tensors' names, types, shapes or offsets differ"
        if stamped == signature(stat):
            return None  # (its content matched the record, and the file has not been written since)
    if file_sha256(path) != recorded.get("sha256"):
        return "has changed since it was written: its SHA-256 differs"
    return None


def _stamped(directory: Path) -> dict:
    try:
        stamped = json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return stamped if isinstance(stamped, dict) else {}


def stamp(directory: Path) -> None:
    """Mark the weights of ``directory`` (just written and described) as verified."""
    weights = [n for n in _files(directory, ()) if n.endswith(WEIGHTS)]
    _stamp(directory, {n: signature((directory / n).stat()) for n in weights}, {})


def _stamp(directory: Path, signatures: dict, stamped: dict) -> None:
    """Write ``STAMP`` (atomically: a reader sees the old or the new one) where it changes; a cache that cannot
    be written keeps none, and its weights are hashed once per process."""
    if signatures == stamped:
        return
    try:
        handle, tmp = tempfile.mkstemp(prefix=f".{STAMP}.", dir=directory)
    except OSError:
        return
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(signatures, out)
        os.replace(tmp, directory / STAMP)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
