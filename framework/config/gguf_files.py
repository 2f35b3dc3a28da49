"""A GGUF file (llama.cpp's format: a model's weights, config and tokenizer in one file) as a model
directory: converted once, by ``transformers``' own GGUF reader (the weights dequantized to float32),
into a directory as ``save_pretrained`` writes it (config.json, model.safetensors under the library's
parameter names, the tokenizer's files with its chat template, generation_config.json), in a cache
keyed by the file's content: ``$XDG_CACHE_HOME/framework/gguf/<sha256, 16 hex digits>/`` (default
``~/.cache``). Written in a folder beside it and renamed, under a file lock: ranks or runs that start
at once convert it once, the others wait and use the result. Its record (``RECORD``, written last) lists
what it wrote, and each use verifies the entry against it (cache_entry.py); a damaged entry is converted
again, with a warning naming it, or where the cache cannot be written the run is refused, naming it.
Needs ``transformers``, ``gguf`` and ``accelerate`` (the ``hf`` extra); imported when a GGUF file is first
used (no torch on import)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from framework.config.cache_entry import damage, describe, file_sha256, stamp
from framework.config.optional_modules import install_hint, is_missing

log = logging.getLogger(__name__)

RECORD = "gguf_source.json"  # written last: a directory without it is not a conversion
KEY_DIGITS = 16
_failures: dict[str, str] = {}  # digest -> why it did not convert (this process asks once)
_architectures: dict[str, str] = {}  # digest -> its header's architecture (the reader takes seconds)


class GGUFError(ValueError):
    """A GGUF file that does not convert: damaged, not GGUF, or of a model transformers cannot read.
    Its message names the file; the caller adds the config key."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/framework/gguf`` (``~/.cache/framework/gguf`` when it is not set)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "framework" / "gguf"


def entry_damage(target: Path) -> Optional[str]:
    """Why the cache entry ``target`` is not what its conversion wrote (None: it is; see cache_entry.py)."""
    try:
        record = json.loads((target / RECORD).read_text())
    except (OSError, ValueError) as err:
        return f"its record {RECORD} does not read ({err})"
    return damage(target, record.get("files") if isinstance(record, dict) else None, (RECORD,))


def converted(path: Path) -> Path:
    """The model directory of the GGUF file ``path``: its conversion in the cache, verified, made now if there
    is none or it is damaged (about 25 s for a 135M-parameter model on 2 cores). GGUFError when it does not
    convert, or a damaged entry cannot be converted again."""
    digest = file_sha256(path)
    target = cache_root() / digest[:KEY_DIGITS]
    damaged = entry_damage(target) if (target / RECORD).is_file() else None
    if (target / RECORD).is_file() and damaged is None:
        return target
    if digest in _failures:
        raise GGUFError(_failures[digest])
    try:
        if digest not in _architectures:  # (first: a file that is no model leaves nothing in the cache)
            _architectures[digest] = header_architecture(path)
        architecture = _architectures[digest]
        target.parent.mkdir(parents=True, exist_ok=True)
        with _locked(target.parent / f"{target.name}.lock"):
            # (another process may have converted it, or converted it again, while this one waited)
            if not (target / RECORD).is_file() or entry_damage(target) is not None:
                if damaged:  # (said once the lock is held: a cache that cannot be written refuses instead)
                    log.warning(
                        "The GGUF cache entry %s (of %s) is damaged: %s; converting it again", target, path, damaged
                    )
                _convert_into(path, target, digest, architecture)
    except GGUFError as err:
        _failures[digest] = str(err)
        raise
    except OSError as err:  # (a cache that cannot be written: named, not a traceback)
        raise GGUFError(_unwritable(path, target, damaged, err)) from None
    return target


def _unwritable(path: Path, target: Path, damaged: Optional[str], err: OSError) -> str:
    why = err.strerror or str(err)
    if damaged is None:
        return (
            f"'{path}': its conversion cannot be written to {target.parent} ({why}); "
            "set XDG_CACHE_HOME to a writable directory"
        )
    return (
        f"'{path}': its cache entry {target} is damaged: {damaged}; it cannot be converted again here ({why}): "
        f"remove the entry (rm -r '{target}') where the cache can be written, or set XDG_CACHE_HOME to a "
        "writable directory"
    )


@contextlib.contextmanager
def _locked(lock: Path):
    """An exclusive ``fcntl`` lock on ``lock`` (the kernel releases it if the holder dies)."""
    import fcntl

    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _convert_into(path: Path, target: Path, digest: str, architecture: str) -> None:
    """Convert ``path`` into a folder beside ``target``, then rename it into place (holding the lock)."""
    for stale in target.parent.glob(f".{target.name}.*"):  # a conversion that was killed: the lock is ours now
        shutil.rmtree(stale, ignore_errors=True)
    log.warning("Converting the GGUF file %s (%s) once, into %s", path, architecture, target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    old = tmp.with_name(f"{tmp.name}.old")
    try:
        _write_directory(path, tmp)
        source = {"file": str(path), "sha256": digest, "size": path.stat().st_size, "architecture": architecture}
        (tmp / RECORD).write_text(json.dumps({**source, "files": describe(tmp)}, indent=2))
        stamp(tmp)  # (hashed just now: a rename keeps the files' mtime and inode)
        if target.exists():  # a damaged entry, or a directory without its record: moved aside whole, then removed
            os.replace(target, old)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def header_architecture(path: Path) -> str:
    """The model architecture the file's header names (``general.architecture``), checked against what
    ``transformers`` reads. GGUFError: not a GGUF file, damaged or cut short, or a foreign architecture."""
    missing = [m for m in ("gguf", "transformers", "accelerate") if is_missing(m)]  # (transformers reads it with all 3)
    if missing:
        raise GGUFError(
            f"'{path}': reading a GGUF file needs {', '.join(missing)}, not installed; {install_hint(*missing)}"
        )
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise GGUFError(f"'{path}' is not a GGUF file (it does not begin with GGUF's magic bytes, 'GGUF')")
    try:
        field = GGUFReader(str(path)).get_field("general.architecture")
        architecture = field.contents() if field is not None else None
    except (ValueError, IndexError, KeyError, OSError) as err:  # (what the reader raises on a damaged file)
        raise GGUFError(
            f"'{path}' is a damaged GGUF file, or cut short: its header does not describe it "
            f"({str(err).splitlines()[0]}); copy it again"
        ) from None
    readable = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]
    if architecture not in readable:
        raise GGUFError(
            f"'{path}' holds a GGUF model of architecture {architecture!r} (general.architecture), which "
            f"transformers cannot read; it reads: {', '.join(readable)}"
        )
    return architecture


def _write_directory(path: Path, directory: Path) -> None:
    """The model of the GGUF file ``path`` as ``save_pretrained`` would write it, into ``directory``.
    (``save_pretrained`` itself refuses a model loaded from GGUF: its config keeps the GGUF
    quantization, which the directory's weights no longer have.)"""
    import torch
    import transformers
    from safetensors.torch import save_file

    transformers.utils.logging.set_verbosity_error()
    source = {"pretrained_model_name_or_path": str(path.parent), "gguf_file": path.name, "local_files_only": True}
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(**source)
        model = transformers.AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32)
    except (ValueError, KeyError, TypeError, OSError, RuntimeError) as err:
        raise GGUFError(f"'{path}' does not convert to a transformers model: {str(err).splitlines()[0]}") from None
    tokenizer.save_pretrained(str(directory))
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.architectures = [type(model).__name__]
    config.save_pretrained(str(directory))
    if model.can_generate():
        model.generation_config.save_pretrained(str(directory))
    save_file(_unshared(model.state_dict()), str(directory / "model.safetensors"), metadata={"format": "pt"})


def _unshared(weights: dict) -> dict:
    """Each storage once, under its first name (a tied head is the embedding's: safetensors refuses
    shared tensors, and ``from_pretrained`` ties it again from the config)."""
    seen, out = set(), {}
    for name, tensor in weights.items():
        if tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        out[name] = tensor.detach().contiguous()
    return out
