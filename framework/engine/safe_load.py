"""Reading a checkpoint as data: nothing in it can run code when it is loaded.

Every file the framework reads back goes through an allowlist: ``torch.load(weights_only=True)``
for trainer.pt, rng/<r>.pt, buffers/<r>.pt and a model.pt (tensors, containers, numbers,
strings; and numpy's array reconstruction, which old RNG files hold); a restricted unpickler for
torch.distributed.checkpoint's ``.metadata`` (DCP's own metadata classes, torch sizes, dtypes and
layouts, a path) and ``weights_only`` for the values DCP stores as bytes. A file that needs
anything else is refused with the object it asked for. ``trust_checkpoint=true`` is the explicit
way to load a checkpoint from someone you trust whose files hold more (an old or foreign one).
"""

from __future__ import annotations

import io
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from framework.engine.checkpoint_files import CheckpointError, changed_contents, outside, size_written

TRUST_HINT = "if you trust whoever wrote it, load it with trust_checkpoint=true"

# What DCP's .metadata pickle is made of (torch 2.4-2.14): its dataclasses and their fields' types.
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "MetadataIndex",
        "TensorProperties",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch.serialization": {"_get_layout"},
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
}


def _numpy_array_globals() -> list:
    """numpy's array reconstruction (np.random.get_state() as older checkpoints saved it): it
    builds arrays of plain dtypes, whose contents pass the same allowlist."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


class UntrustedCheckpoint(CheckpointError):
    """A checkpoint file that would run code (or build objects outside the allowlist) when loaded."""


def refusal(what: str, needs: str) -> UntrustedCheckpoint:
    return UntrustedCheckpoint(
        f"{what} is refused: loading it would call {needs}, which is not data (a "
        f"checkpoint holds tensors and plain values), so it could run code; {TRUST_HINT}"
    )


def _allowed(module: str, name: str) -> bool:
    if name in _METADATA_CLASSES.get(module, ()):
        return True
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file, path: Path):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str):
        if not _allowed(module, name):
            raise refusal(f"checkpoint file '{self.path}'", f"{module}.{name}")
        return super().find_class(module, name)


@dataclass(frozen=True)
class DcpMetadata:
    """A DCP checkpoint's ``.metadata`` and the directory whose files it names."""

    metadata: Any
    directory: Path

    @classmethod
    def read(cls, path, trust: bool = False) -> "DcpMetadata":
        file = Path(path) / ".metadata"
        with open(file, "rb") as f:
            metadata = pickle.load(f) if trust else _MetadataUnpickler(f, file).load()
        return cls(metadata, Path(path))

    def checked(self):
        """The metadata; refused when it names a file outside its checkpoint's directory (an absolute
        or ``../`` storage path would read another run's tensors as this checkpoint's)."""
        directory = self.directory
        for index, info in (getattr(self.metadata, "storage_data", None) or {}).items():
            relative = str(getattr(info, "relative_path", "") or "")
            if Path(relative).is_absolute() or outside(directory / relative, directory):
                raise CheckpointError(
                    f"checkpoint file '{directory / '.metadata'}' names '{relative}' for "
                    f"{getattr(index, 'fqn', index)}, outside the checkpoint's directory: refused "
                    "(every file of a checkpoint lies inside it)"
                )
        return self.metadata


def read_dcp_metadata(path: Path, trust: bool = False):
    """The ``.metadata`` of the DCP checkpoint directory ``path``, every file it names inside ``path``."""
    return DcpMetadata.read(path, trust).checked()


def load_file(path, trust: bool = False, map_location: Any = "cpu", description: str = "") -> Any:
    """``torch.load`` of a file the framework wrote (or a model.pt), as data unless ``trust``."""
    if trust:
        return torch.load(path, map_location=map_location, weights_only=False)
    try:
        with torch.serialization.safe_globals(_numpy_array_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"GLOBAL ([\w.]+)", str(err)) or re.search(r"global '?([\w.]+)", str(err))
        if not found and "weights_only" not in str(err).lower().replace(" ", "_"):
            # not a refused object: a file whose bytes do not make a pickle at all
            raise CheckpointError(
                f"{description or f'checkpoint file {str(path)!r}'} is damaged: it is not a "
                f"readable torch.save file ({str(err).splitlines()[0]})"
            ) from None
        needs = found.group(1) if found else "an object outside the allowlist"
        needs = needs if "." in needs or not found else f"builtins.{needs}"  # torch names builtins bare
        raise refusal(description or f"checkpoint file '{path}'", needs) from None


def unsafe_globals(path: Path) -> list[str]:
    """What ``path`` (a torch.save file) would import beyond the allowlist, read without loading it."""
    allowed = {f"{f.__module__}.{f.__qualname__}" for f in _numpy_array_globals()}
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
    except Exception:  # noqa: BLE001 - not a zip torch.save file (a legacy or foreign pickle)
        return ["a pickle that is not a torch.save archive"]
    return [name for name in found if name not in allowed]


def _damaged_archive(path: Path) -> bool:
    """A file that starts as a torch.save archive (a zip) but is not a readable one: damage, not a
    legacy pickle (which would need ``trust_checkpoint``)."""
    import zipfile

    with open(path, "rb") as f:
        return f.read(4) == b"PK\x03\x04" and not zipfile.is_zipfile(path)


def dcp_reader(path: Path, trust: bool = False):
    """A torch.distributed.checkpoint storage reader whose metadata is read as data."""
    from torch.distributed.checkpoint import FileSystemReader

    class _Reader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            if trust:
                return DcpMetadata(super().read_metadata(*args, **kwargs), Path(path)).checked()
            metadata = read_dcp_metadata(Path(path))
            from torch.distributed.checkpoint.metadata import StorageMeta

            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return _Reader(str(path))


def dcp_planner(trust: bool = False):
    """DCP's default load planner, refusing a value it stored as bytes that is not data."""
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class _Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value: io.BytesIO) -> None:
            if not trust:
                # Loaded as data first: only then may DCP's own (unrestricted) load read it,
                # which then calls nothing but what the allowlist admitted.
                load_file(value, description=f"the value {read_item.dest_index.fqn} of a checkpoint's .distcp file")
                value.seek(0)
            super().load_bytes(read_item, value)

    return _Planner()


def scan_checkpoint(path: Path) -> list[str]:
    """Why loading the checkpoint directory (or torch.save file) ``path`` as data would be refused,
    found without loading anything but DCP's small .metadata (through the allowlist)."""
    path = Path(path)
    files = (
        [path]
        if path.is_file()
        else [path / "trainer.pt", *sorted(path.glob("rng/*.pt")), *sorted(path.glob("buffers/*.pt"))]
    )
    problems = []
    for file in (f for f in files if f.is_file()):
        if _damaged_archive(file):  # damage, not a refused object: trust_checkpoint would not help
            if not path.is_dir() or size_written(path, str(file.relative_to(path))) == file.stat().st_size:
                problems.append(
                    f"checkpoint file '{file}' is damaged: a torch.save archive that cannot be read "
                    "(truncated or overwritten)"
                )  # (another size: the manifest's check names it)
            continue
        problems += [str(refusal(f"checkpoint file '{file}'", needs)) for needs in unsafe_globals(file)[:1]]
    if path.is_dir() and (path / ".metadata").is_file():
        try:
            read_dcp_metadata(path)
        except CheckpointError as err:  # code it would run, or a file it names outside the checkpoint
            problems.append(str(err))
        except Exception as err:  # noqa: BLE001 - a damaged file: its CRC says so when its manifest knows it
            problems.append(
                changed_contents(path, ".metadata")
                or f"checkpoint file '{path / '.metadata'}' cannot be read: {type(err).__name__}: {err}"
            )
    return problems
