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
import zlib
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
    """One shard's tokens and document offsets under ``directory/shards``; its index entry, with the
    checksums of both files (CRC-32) and the largest token id."""
    shards = directory / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    data = np.ascontiguousarray(tokens).astype(tokens.dtype.newbyteorder("<")).tobytes()
    write_atomic(shards / f"{name}.bin", data)
    starts, saved = np.asarray(document_starts, dtype=np.int64), io.BytesIO()
    np.save(saved, starts, allow_pickle=False)
    write_atomic(Path(offsets_file(shards / f"{name}.bin")), saved.getvalue())
    return {
        "file": f"shards/{name}.bin",
        "tokens": int(len(tokens)),
        "documents": int(len(starts)),
        "crc32": zlib.crc32(data),
        "docs_crc32": zlib.crc32(saved.getvalue()),
        "max_id": int(tokens.max()) if len(tokens) else -1,
    }


def file_crc32(path, chunk: int = 8 << 20) -> int:
    """The CRC-32 of a file, read in chunks (about 2 GB/s)."""
    value = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            value = zlib.crc32(block, value)
    return value


def identity(index: dict) -> dict:
    """What a prepared corpus is, split by split: each shard's file, tokens and checksum, in order
    (what a checkpoint records of the data it trained on)."""
    return {
        split: [{k: shard.get(k) for k in ("file", "tokens", "crc32")} for shard in index["splits"].get(split, [])]
        for split in SPLITS
    }


def corpus_change(saved: dict, now: dict, split: str = "train") -> Optional[str]:
    """How ``split`` of the corpus ``now`` (``identity``) differs from ``saved``: None (the same),
    "grown" (shards appended after the saved ones), or what changed, naming the first shard."""
    before, after = saved.get(split, []), now.get(split, [])
    for i, shard in enumerate(before):
        if i >= len(after):
            return (
                f"its {split} split has {len(after)} shards, {len(before)} when it was trained on "
                f"({shard['file']} is gone)"
            )
        if after[i] != shard:
            return (
                f"shard {shard['file']} of its {split} split is not the one trained on (tokens "
                f"{shard['tokens']} -> {after[i]['tokens']}, checksum {shard.get('crc32')} -> "
                f"{after[i].get('crc32')}, file {after[i]['file']})"
            )
    return "grown" if len(after) > len(before) else None


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


class PreparedCorpus:
    """A prepared corpus on disk: its ``directory`` and its index (read from there unless given), what
    ``datamodule=tokens`` checks before it reads the shards."""

    def __init__(self, directory, index: Optional[dict] = None):
        self.directory = Path(directory)
        self.index = index if index is not None else read_index(directory)

    def problems(self) -> list[str]:
        """Shards the index names that lie outside the corpus's ``shards/``, are missing, are not of the
        size its token count says (a truncated copy), or whose document offsets are damaged, each naming
        the file. The tokens themselves are not read here: a rank checks each shard's checksum when it
        first reads it (``ShardChecks``)."""
        problems = []
        width = np.dtype(self.index["dtype"]).itemsize
        inside = (self.directory / "shards").resolve()
        for split in SPLITS:
            for shard in self.index["splits"].get(split, []):
                path = self.directory / str(shard["file"])
                if inside not in path.resolve().parents:
                    problems.append(
                        f"the index lists '{shard['file']}', outside the corpus's shards/ directory: the index is "
                        f"damaged or not this corpus's ({self.directory / INDEX}); prepare the corpus again"
                    )
                elif not path.is_file():
                    problems.append(f"missing shard '{path}' (the index lists {shard['tokens']} tokens there)")
                elif path.stat().st_size != shard["tokens"] * width:
                    problems.append(
                        f"shard '{path}' has {path.stat().st_size} bytes, the index says "
                        f"{shard['tokens']} tokens of {self.index['dtype']} ({shard['tokens'] * width} bytes): "
                        "it is truncated or not this corpus's; prepare the corpus again"
                    )
                else:
                    problems += self._offsets_problems(Path(offsets_file(path)), shard)
        return problems

    @staticmethod
    def _offsets_problems(docs: Path, shard: dict) -> list[str]:
        """The document offsets of a shard: an int64 array of one offset per document, the first 0, each
        after the one before and inside the shard, with the checksum the index recorded."""
        documents = shard["documents"]
        if not docs.is_file():
            return [f"missing document offsets '{docs}'"]
        try:
            offsets = np.load(docs, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):
            return [
                f"document offsets '{docs}' are not a whole saved array (damaged, or cut short): "
                "prepare the corpus again"
            ]
        if offsets.dtype != np.int64 or offsets.shape != (documents,):
            return [
                f"document offsets '{docs}' hold {offsets.shape} {offsets.dtype}, the index says {documents} int64: "
                "prepare the corpus again"
            ]
        if shard.get("docs_crc32") is not None and file_crc32(docs) != shard["docs_crc32"]:
            return [
                f"document offsets '{docs}' are damaged (their checksum is not the index's): prepare the corpus again"
            ]
        steps = np.diff(offsets)
        if documents and (offsets[0] != 0 or (steps <= 0).any() or offsets[-1] >= max(shard["tokens"], 1)):
            return [
                f"document offsets '{docs}' are damaged ({int((steps <= 0).sum())} not increasing, or outside the "
                f"shard's {shard['tokens']} tokens): prepare the corpus again"
            ]
        return []


def max_token_id(index: dict) -> Optional[int]:
    """The largest token id of the corpus, with the shard that holds it (from the index; None for a
    corpus prepared before the index recorded it)."""
    found = [(s["max_id"], s["file"]) for split in SPLITS for s in index["splits"].get(split, []) if "max_id" in s]
    return max(found) if found else None


def split_tokens(index: dict, split: str) -> int:
    return sum(shard["tokens"] for shard in index["splits"].get(split, []))
