"""The on-disk form of a prepared corpus (``framework-prepare-data`` writes it, ``datamodule=tokens``
reads it): token shards and one index.

``<dir>/index.json`` names everything: the tokenizer (its fingerprint and vocabulary size), the token
dtype, the inputs prepared (path, size, modification time) and, per split, its shards in order. A
shard is ``shards/<input>-<piece>.<split>.bin``, raw little-endian tokens (uint16 when the vocabulary
fits, else uint32), beside ``.docs.npy``, the offsets where its documents start. A split is its shards
read one after another as one stream of tokens. Nothing here is code: JSON and raw numbers only.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Optional

import numpy as np

INDEX = "index.json"
FORMAT = 1
SPLITS = ("train", "val", "test")


def token_dtype(vocab_size: int) -> str:
    return "uint16" if vocab_size <= 2**16 else "uint32"


def tokenizer_fingerprint(tokenizer_json: Optional[Path]) -> str:
    """What identifies a tokenizer: a hash of its JSON with keys sorted and its padding and truncation
    left out (they do not change the ids), or ``bytes`` for UTF-8 bytes."""
    if tokenizer_json is None:
        return "bytes"
    spec = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    spec.pop("padding", None)
    spec.pop("truncation", None)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path``, written beside it and renamed: a reader never sees half a file."""
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def offsets_file(shard) -> str:
    """The document offsets beside a shard's tokens (``<name>.bin`` -> ``<name>.docs.npy``)."""
    return str(shard)[: -len(".bin")] + ".docs.npy"


def write_shard(directory: Path, name: str, tokens: np.ndarray, document_starts: np.ndarray) -> dict:
    """One shard's tokens and document offsets under ``directory/shards``; its index entry."""
    shards = directory / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    write_atomic(shards / f"{name}.bin", np.ascontiguousarray(tokens).astype(tokens.dtype.newbyteorder("<")).tobytes())
    starts, saved = np.asarray(document_starts, dtype=np.int64), io.BytesIO()
    np.save(saved, starts, allow_pickle=False)
    write_atomic(Path(offsets_file(shards / f"{name}.bin")), saved.getvalue())
    return {"file": f"shards/{name}.bin", "tokens": int(len(tokens)), "documents": int(len(starts))}


def read_index(directory) -> dict:
    """The index of a prepared corpus; FileNotFoundError or ValueError (naming the file) when it is
    missing or not one."""
    path = Path(directory) / INDEX
    if not path.is_file():
        raise FileNotFoundError(
            f"no prepared corpus at '{directory}' ({INDEX} missing): prepare one with "
            f"framework-prepare-data input=<files> output={directory}"
        )
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"'{path}' is not a prepared corpus's index ({err})") from err
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ValueError(f"'{path}' is not an index of format {FORMAT}: prepare the corpus again")
    return index


def write_index(directory: Path, index: dict) -> None:
    write_atomic(Path(directory) / INDEX, json.dumps(index, indent=1).encode())


def shard_problems(directory, index: dict) -> list[str]:
    """Shards the index names that are missing or not of the size its token count says (a
    truncated copy), each naming the file: checked by size, without reading a token."""
    problems = []
    width = np.dtype(index["dtype"]).itemsize
    for split in SPLITS:
        for shard in index["splits"].get(split, []):
            path = Path(directory) / shard["file"]
            docs = Path(offsets_file(path))
            if not path.is_file():
                problems.append(f"missing shard '{path}' (the index lists {shard['tokens']} tokens there)")
            elif path.stat().st_size != shard["tokens"] * width:
                problems.append(
                    f"shard '{path}' has {path.stat().st_size} bytes, the index says "
                    f"{shard['tokens']} tokens of {index['dtype']} ({shard['tokens'] * width} bytes): "
                    "it is truncated or not this corpus's; prepare the corpus again"
                )
            else:
                problems += _offsets_problems(docs, shard["documents"])
    return problems


def _offsets_problems(docs: Path, documents: int) -> list[str]:
    """The document offsets of a shard: an int64 array of one offset per document (its header read,
    not its numbers)."""
    if not docs.is_file():
        return [f"missing document offsets '{docs}'"]
    try:
        offsets = np.load(docs, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError):
        return [
            f"document offsets '{docs}' are not a whole saved array (damaged, or cut short): prepare the corpus again"
        ]
    if offsets.dtype != np.int64 or offsets.shape != (documents,):
        return [
            f"document offsets '{docs}' hold {offsets.shape} {offsets.dtype}, the index says {documents} int64: "
            "prepare the corpus again"
        ]
    return []


def split_tokens(index: dict, split: str) -> int:
    return sum(shard["tokens"] for shard in index["splits"].get(split, []))
