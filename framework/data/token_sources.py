"""The inputs of ``framework-prepare-data``: files, folders or globs of ``.txt``, ``.jsonl``,
``.parquet``, ``.arrow`` (a ``datasets`` directory that ``save_to_disk`` wrote), and ``.txt`` or
``.jsonl`` compressed (``.gz``, ``.zst``), cut into pieces that worker processes read and tokenize
independently.

A piece is a byte range of a ``.txt`` or ``.jsonl`` file that ends where a document does (at the
separator, or a line's end), one row group of a ``.parquet`` file, or a whole ``.arrow`` or
compressed file: the same inputs always give the same pieces, so an interrupted preparation resumes
piece by piece. Documents: a ``.txt`` file's paragraphs (separated by ``document_separator``, each
keeping it, so the documents put back together are the file), a ``.jsonl`` line's, a ``.parquet``
or ``.arrow`` row's ``text_key`` field (read by pyarrow). ``Filter``: documents shorter than a number
of characters, and rows whose field does not have a value, are left out.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SUFFIXES = (".txt", ".jsonl", ".parquet", ".arrow", ".txt.gz", ".txt.zst", ".jsonl.gz", ".jsonl.zst")
PYARROW_KINDS = tuple(k for k in SUFFIXES if k != ".txt")  # read, or decompressed, by pyarrow
_CODECS = {".gz": "gzip", ".zst": "zstd"}


def kind(path: Path) -> str:
    """The input kind of ``path``: its suffix, a compressed one with the compression's (``.jsonl.gz``)."""
    both = "".join(path.suffixes[-2:])
    return both if both in SUFFIXES else path.suffix


@dataclass(frozen=True)
class Filter:
    """What documents are kept: at least ``min_chars`` characters; with ``where`` ("field=value"), a
    .jsonl, .parquet or .arrow row whose ``field`` is that value (compared as text)."""

    min_chars: int = 0
    where: str | None = None

    def rows(self, table, text_key: str) -> list[str]:
        texts = table.column(text_key).to_pylist()
        if self.where:
            field, _, value = self.where.partition("=")
            if field not in table.column_names:
                raise ValueError(
                    f"where: the rows have no field '{field}' (their fields: {', '.join(table.column_names)})"
                )
            texts = [t for t, v in zip(texts, table.column(field).to_pylist()) if str(v) == value]
        return [t for t in texts if t and len(t) >= self.min_chars]


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
        return sorted(p for p in path.rglob("*") if kind(p) in SUFFIXES and p.is_file())
    if path.is_file():
        return [path]
    return sorted(Path(p) for p in glob.glob(str(path), recursive=True) if kind(Path(p)) in SUFFIXES)


def input_files(inputs: list[str]) -> list[Path]:
    """Every file the inputs name, in order, each once (absolute); ValueError naming an input that
    names none, or a file of a kind not read."""
    files: dict[Path, None] = {}
    for given in inputs:
        found = _expand(str(given))
        if not found:
            raise ValueError(
                f"input: '{given}' names no .txt, .jsonl, .parquet file (nor .arrow, or .txt or .jsonl compressed as "
                ".gz or .zst; a file, a folder or a glob)"
            )
        for path in found:
            if kind(path) not in SUFFIXES:
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
    if kind(path) == ".arrow" or kind(path)[-4:] in (".zst", "l.gz", "t.gz"):  # whole: no byte range to seek to
        size = path.stat().st_size
        return [Piece(input_number, 0, str(path), 0, size, size)]
    if path.suffix == ".parquet":
        metadata = _parquet(path).metadata
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


def _texts(table, path: Path, piece: Piece, text_key: str, keep: Filter) -> list[str]:
    if text_key not in table.column_names:
        raise ValueError(f"text_key: '{path}' has no field '{text_key}' (its fields: {', '.join(table.column_names)})")
    if table.num_rows and table.column(text_key).null_count == table.num_rows:
        raise ValueError(f"text_key: no row of '{path}' (piece {piece.name}) has a '{text_key}' field")
    return keep.rows(table, text_key)


def _columns(text_key: str, keep: Filter) -> list[str]:
    return [text_key] + ([keep.where.partition("=")[0]] if keep.where else [])


def _table(path: Path, piece: Piece, raw: bytes, text_key: str, keep: Filter):
    """The rows of a piece of a .parquet or .arrow file, or of JSON lines (``raw``)."""
    import pyarrow as pa

    if kind(path) == ".parquet":
        parquet = _parquet(path)
        if text_key not in parquet.schema_arrow.names:
            raise ValueError(
                f"text_key: '{path}' has no column '{text_key}' (its columns: {', '.join(parquet.schema_arrow.names)})"
            )
        wanted = [c for c in _columns(text_key, keep) if c in parquet.schema_arrow.names]
        try:
            return parquet.read_row_group(piece.start, columns=wanted or None)
        except (OSError, pa.ArrowException) as err:
            raise ValueError(f"input: '{path}' row group {piece.start} does not read ({_first_line(err)})") from None
    if kind(path) == ".arrow":
        return _arrow_table(path)
    import pyarrow.json as pj

    fields = [(text_key, pa.string())]
    options = pj.ParseOptions(
        explicit_schema=pa.schema(fields), unexpected_field_behavior="infer" if keep.where else "ignore"
    )
    try:
        return pj.read_json(pa.BufferReader(raw), parse_options=options)
    except pa.ArrowInvalid as err:
        line = _bad_line(path, piece, raw, text_key)
        if line:
            raise ValueError(f"input: '{path}' {line}; each line is a JSON object with a text '{text_key}'") from None
        raise ValueError(
            f"input: '{path}' (bytes {piece.start}-{piece.end}) is not JSON lines with a text '{text_key}': {err}"
        ) from None


def _parquet(path: Path):
    """A Parquet file's reader; ValueError naming the file whose footer does not read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as err:
        raise ValueError(
            f"input: '{path}' does not read as Parquet, damaged or cut short? ({_first_line(err)})"
        ) from None


def _arrow_table(path: Path):
    """A ``datasets`` file (``save_to_disk``: an Arrow IPC stream, or an IPC file), batch by batch:
    ValueError naming the file and the rows read before it broke."""
    import pyarrow as pa

    rows = 0
    with pa.memory_map(str(path)) as source:
        try:
            try:
                reader = pa.ipc.open_stream(source)
            except pa.ArrowInvalid:
                return pa.ipc.open_file(source).read_all()
            batches = []
            for batch in reader:
                batches.append(batch)
                rows += batch.num_rows
            return pa.Table.from_batches(batches, reader.schema)
        except (OSError, pa.ArrowException) as err:
            raise ValueError(
                f"input: '{path}' does not read as Arrow {_after(rows, 'row')}, damaged or cut short? "
                f"({_first_line(err)})"
            ) from None


def _bad_line(path: Path, piece: Piece, raw: bytes, text_key: str) -> Optional[str]:
    """ "line N: why" of the first line of ``raw`` that is not a JSON object with a text (or null)
    ``text_key``, numbered in the whole file; None when each line is one."""
    for number, line in enumerate(raw.split(b"\n"), 1):
        why = _line_problem(line, text_key) if line.strip() else ""
        if why:
            return f"line {_lines_before(path, piece) + number}: {why}"
    return None


def _line_problem(line: bytes, text_key: str) -> str:
    import json

    try:
        row = json.loads(line)
    except UnicodeDecodeError:
        return "not UTF-8 text"
    except json.JSONDecodeError as err:
        return f"not JSON ({err.msg} at column {err.colno})"
    if not isinstance(row, dict):
        return f"not a JSON object (a {type(row).__name__})"
    value = row.get(text_key)
    return "" if value is None or isinstance(value, str) else f"'{text_key}' is {type(value).__name__}, not text"


def _lines_before(path: Path, piece: Piece) -> int:
    """The lines of ``path`` before ``piece`` (none in a compressed file, read whole)."""
    if piece.start == 0 or _CODECS.get(path.suffix):
        return 0
    count, left = 0, piece.start
    with open(path, "rb") as f:
        while left > 0:
            block = f.read(min(left, 1 << 20))
            count, left = count + block.count(b"\n"), left - len(block)
    return count


def _after(count: int, unit: str) -> str:
    """Where reading stopped: "after its first 957 lines" ("before its first line")."""
    return f"after its first {count:,} {unit}s" if count else f"before its first {unit}"


def _first_line(err: BaseException) -> str:
    return (str(err) or type(err).__name__).strip().splitlines()[0]


def _raw(path: Path, piece: Piece) -> bytes:
    """A piece's bytes: its range of a plain file, or a compressed file's whole contents."""

    codec = _CODECS.get(path.suffix)
    if codec is not None and kind(path) != path.suffix:
        return _decompressed(path, codec)
    with open(path, "rb") as f:
        f.seek(piece.start)
        return f.read(piece.end - piece.start)


def _decompressed(path: Path, codec: str) -> bytes:
    """A compressed file's contents; ValueError naming the file and how far it read (in lines) where
    it is cut short or damaged."""
    import pyarrow as pa

    blocks, lines = [], 0
    try:
        with pa.input_stream(str(path), compression=codec) as stream:
            while block := stream.read(1 << 16):
                blocks.append(block)
                lines += block.count(b"\n")
    except (OSError, pa.ArrowException) as err:
        raise ValueError(
            f"input: '{path}' is cut short or damaged: {codec} fails {_after(lines, 'line')} ({_first_line(err)})"
        ) from None
    return b"".join(blocks)


def read_documents(piece: Piece, separator: str, text_key: str, keep: Filter = Filter()) -> list[str]:
    """The documents of one piece that ``keep`` keeps, in order; ValueError naming the file and the key
    for rows without the text field (or the filter's), or a line that is not JSON."""
    path = Path(piece.path)
    raw = b"" if kind(path) in (".parquet", ".arrow") else _raw(path, piece)
    if kind(path).startswith(".txt"):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            line = _lines_before(path, piece) + raw[: err.start].count(b"\n") + 1
            raise ValueError(f"input: '{path}' line {line}: not UTF-8 text ({err.reason})") from None
        return [d for d in _paragraphs(text, separator) if len(d) >= keep.min_chars]
    if kind(path).startswith(".jsonl") and not raw.strip():
        return []
    return _texts(_table(path, piece, raw, text_key, keep), path, piece, text_key, keep)
