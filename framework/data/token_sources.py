"""The inputs of ``framework-prepare-data``: files, folders or globs of ``.txt``, ``.jsonl`` and
``.parquet``, cut into pieces that worker processes read and tokenize independently.

A piece is a byte range of a ``.txt`` or ``.jsonl`` file that ends where a document does (at the
separator, or a line's end), or one row group of a ``.parquet`` file: the same inputs always give the
same pieces, so an interrupted preparation resumes piece by piece. Documents: a ``.txt`` file's
paragraphs (separated by ``document_separator``, each keeping it, so the documents put back together
are the file), a ``.jsonl`` line's or a ``.parquet`` row's ``text_key`` field (read by pyarrow).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path

SUFFIXES = (".txt", ".jsonl", ".parquet")


@dataclass(frozen=True)
class Piece:
    """Piece ``number`` of input ``input_number``: bytes [start, end) of a text file, or row group
    ``start`` of a parquet file; ``size``: its bytes (a row group's uncompressed), for progress."""

    input_number: int
    number: int
    path: str
    start: int
    end: int
    size: int

    @property
    def name(self) -> str:
        return f"{self.input_number:05d}-{self.number:05d}"


def _expand(given: str) -> list[Path]:
    path = Path(given).expanduser()
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.suffix in SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    return sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).suffix in SUFFIXES)


def input_files(inputs: list[str]) -> list[Path]:
    """Every file the inputs name, in order, each once (absolute); ValueError naming an input that
    names none, or a file of a kind not read."""
    files: dict[Path, None] = {}
    for given in inputs:
        found = _expand(str(given))
        if not found:
            raise ValueError(f"input: '{given}' names no {', '.join(SUFFIXES)} file (a file, a folder or a glob)")
        for path in found:
            if path.suffix not in SUFFIXES:
                raise ValueError(f"input: '{path}' is not one of {', '.join(SUFFIXES)}")
            files.setdefault(path.resolve(), None)
    return list(files)


def _aligned_ends(path: Path, piece_bytes: int, delimiter: bytes) -> list[int]:
    """Byte offsets that end the pieces of ``path``: about every ``piece_bytes``, moved on to just
    past the next ``delimiter`` (a document never spans two pieces)."""
    size, ends = path.stat().st_size, []
    with open(path, "rb") as f:
        position = 0
        while position < size:
            target = position + piece_bytes
            if target >= size:
                ends.append(size)
                break
            f.seek(target)
            tail, found = b"", -1
            while found < 0:
                block = f.read(1 << 16)
                if not block:
                    break
                tail += block
                found = tail.find(delimiter)
            end = size if found < 0 else target + found + len(delimiter)
            ends.append(end)
            position = end
    return ends


def plan_pieces(input_number: int, path: Path, piece_bytes: int, separator: str) -> list[Piece]:
    """The pieces of one input file."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        metadata = pq.ParquetFile(path).metadata
        return [
            Piece(input_number, g, str(path), g, g + 1, metadata.row_group(g).total_byte_size)
            for g in range(metadata.num_row_groups)
        ]
    delimiter = b"\n" if path.suffix == ".jsonl" else separator.encode("utf-8")
    ends = _aligned_ends(path, piece_bytes, delimiter)
    return [
        Piece(input_number, n, str(path), start, end, end - start)
        for n, (start, end) in enumerate(zip([0, *ends], ends))
    ]


def _paragraphs(text: str, separator: str) -> list[str]:
    parts = text.split(separator)
    documents = [part + separator for part in parts[:-1]] + [parts[-1]]
    return [d for d in documents if d]


def _texts(table, path: Path, piece: Piece, text_key: str) -> list[str]:
    texts = table.column(text_key).to_pylist()
    if texts and all(t is None for t in texts):
        raise ValueError(f"text_key: no row of '{path}' (piece {piece.name}) has a '{text_key}' field")
    return [t for t in texts if t]


def read_documents(piece: Piece, separator: str, text_key: str) -> list[str]:
    """The documents of one piece, in order; ValueError naming the file and the key for a parquet
    file without the column, a .jsonl whose lines lack it, or a line that is not JSON."""
    import pyarrow as pa

    path = Path(piece.path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(path)
        if text_key not in parquet.schema_arrow.names:
            raise ValueError(
                f"text_key: '{path}' has no column '{text_key}' (its columns: {', '.join(parquet.schema_arrow.names)})"
            )
        return _texts(parquet.read_row_group(piece.start, columns=[text_key]), path, piece, text_key)
    with open(path, "rb") as f:
        f.seek(piece.start)
        raw = f.read(piece.end - piece.start)
    if path.suffix == ".txt":
        return _paragraphs(raw.decode("utf-8"), separator)
    import pyarrow.json as pj

    if not raw.strip():
        return []
    options = pj.ParseOptions(explicit_schema=pa.schema([(text_key, pa.string())]), unexpected_field_behavior="ignore")
    try:
        table = pj.read_json(pa.BufferReader(raw), parse_options=options)
    except pa.ArrowInvalid as err:
        raise ValueError(
            f"input: '{path}' (bytes {piece.start}-{piece.end}) is not JSON lines with a text '{text_key}': {err}"
        ) from err
    return _texts(table, path, piece, text_key)
