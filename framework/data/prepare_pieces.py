"""One piece of ``framework-prepare-data``'s work, as a worker process does it: read the piece's
documents, tokenize them, deal each to a split, write the piece's shards, then its marker (the
record that the piece is done, written last: a piece without one is done again)."""

from __future__ import annotations

import itertools
import json
import os
import signal
from pathlib import Path
from typing import Optional

import numpy as np

from framework.data.token_shards import SPLITS, write_atomic, write_shard
from framework.data.token_sources import Filter, Piece, read_documents

_BATCH_CHARS = 1 << 20  # documents encoded together: about a MiB of text at a time
_tokenizers: dict = {}


def init_worker() -> None:
    """A worker process among several: the tokenizer's own thread pool kept to one thread (the
    processes are the parallelism); Ctrl-C left to the parent, which stops the workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["RAYON_NUM_THREADS"] = "1"


def _tokenizer(path: Optional[str]):
    if path and path not in _tokenizers:
        from framework.data.tokenizer_files import load_tokenizer

        _tokenizers[path] = load_tokenizer(path)
    return _tokenizers.get(path) if path else None


def _batches(documents: list[str]):
    batch, size = [], 0
    for document in documents:
        batch.append(document)
        size += len(document)
        if size >= _BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _encode_batch(batch: list[str], tokenizer, eos_id: Optional[int], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    if tokenizer is None:  # UTF-8 bytes: no end-of-text token
        encoded = [d.encode("utf-8") for d in batch]
        lengths = np.fromiter((len(d) for d in encoded), dtype=np.int64, count=len(encoded))
        return np.frombuffer(b"".join(encoded), dtype=np.uint8).astype(dtype), lengths
    ids = [e.ids for e in tokenizer.encode_batch(batch)]
    if eos_id is not None:
        ids = [d if d and d[-1] == eos_id else [*d, eos_id] for d in ids]
    lengths = np.fromiter((len(d) for d in ids), dtype=np.int64, count=len(ids))
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum())), lengths


def encode_documents(
    documents: list[str], tokenizer_path: Optional[str], eos_id: Optional[int], dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    """Every document's tokens, one after another (each followed by ``eos_id`` when given), and
    each document's length."""
    tokenizer = _tokenizer(tokenizer_path)
    encoded = [_encode_batch(batch, tokenizer, eos_id, dtype) for batch in _batches(documents)]
    if not encoded:
        return np.zeros(0, dtype=dtype), np.zeros(0, dtype=np.int64)
    return np.concatenate([t for t, _ in encoded]), np.concatenate([n for _, n in encoded])


def deal_to_splits(count: int, piece: Piece, fractions: tuple[float, float], seed: int) -> np.ndarray:
    """Each document's split (0 train, 1 val, 2 test), drawn from (seed, input, piece): the same
    documents always go to the same split."""
    draws = np.random.default_rng([seed, piece.input_number, piece.number]).random(count)
    val, test = fractions
    return np.where(draws < val, 1, np.where(draws < val + test, 2, 0))


def prepare_piece(job: tuple) -> dict:
    """Tokenize ``piece`` into ``output``: its shards, then its marker; the marker's content."""
    piece, output, settings, source = job
    keep = Filter(settings.get("min_chars", 0), settings.get("where"))
    documents = read_documents(piece, settings["document_separator"], settings["text_key"], keep)
    tokens, lengths = encode_documents(documents, settings["tokenizer_file"], settings["eos_id"], settings["dtype"])
    splits = deal_to_splits(
        len(lengths), piece, (settings["val_fraction"], settings["test_fraction"]), settings["split_seed"]
    )
    token_splits = np.repeat(splits, lengths)
    written = {}
    for number, split in enumerate(SPLITS):
        split_lengths = lengths[splits == number]
        if not split_lengths.sum():
            continue
        offsets = np.concatenate([[0], np.cumsum(split_lengths)[:-1]])
        written[split] = write_shard(Path(output), f"{piece.name}.{split}", tokens[token_splits == number], offsets)
    marker = {
        "piece": piece.name,
        "source": source,
        "start": piece.start,
        "end": piece.end,
        "bytes": piece.size,
        "documents": int(len(lengths)),
        "splits": written,
    }
    markers = Path(output) / "pieces"
    markers.mkdir(parents=True, exist_ok=True)
    write_atomic(markers / f"{piece.name}.json", json.dumps(marker).encode())
    return marker
