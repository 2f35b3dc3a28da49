"""Rows of a file of examples, every one checked as it is read: a ``.jsonl`` file's lines, a
``.parquet`` file's rows, or a ``datasets`` directory's (``save_to_disk``'s ``.arrow`` files). A bad row
is named by its file and line (a ``.jsonl``'s, counted from 1) or row index (a ``.parquet``'s or an
``.arrow`` file's, counted from 0 as ``datasets`` and pandas index them), the first ``SHOWN`` one by one
and the rest counted: before start (a datamodule's ``check_config``) and again where the rank reads the
file. The instruction data (chat.py) and the preference pairs (preference_rows.py) read through it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterator, Optional

from framework.config.errors import ConfigError

ROLES = ("system", "user", "assistant")
SHOWN = 5  # the bad rows a refusal names one by one (the rest are counted)


class RowFile:
    """How one kind of row is checked: ``problem_of(row)`` says why a row is not one (None: it is),
    ``shape`` what one is (for the messages)."""

    def __init__(self, problem_of: Callable[[object], Optional[str]], shape: str):
        self.problem_of, self.shape = problem_of, shape

    def read(self, path: str, key: str = "datamodule.path") -> list[dict]:
        """The rows of ``path``, every one checked: ``ConfigError`` naming the bad ones (under ``key``)."""
        rows, problems = self.checked(path)
        if problems:
            raise ConfigError([f"{key}{p[len('path') :]}" for p in problems])
        return rows

    def count(self, path: str) -> Optional[int]:
        """How many rows ``path`` holds, every one good (None: a bad row, or a file that does not read); read
        once while the file's size and modification time stay (``checked`` counts them as it reads)."""
        if _signature(path) not in _counts:
            self.checked(path)
        return _counts.get(_signature(path))

    def checked(self, path: str) -> tuple[list[dict], list[str]]:
        """(the good rows of ``path``, the problems keyed relative to the datamodule: ``path: <file> line 3:
        ...``, or why the file does not read)."""
        rows, bad, total = [], [], 0
        for where, row, problem in located_rows(Path(path)):
            total += 1
            problem = problem or self.problem_of(row)
            if problem:
                bad.append(f"path: {where}: {problem}" if where else f"path: {problem}")
            else:
                rows.append(row)
        if len(bad) > SHOWN:
            more = f"path: {len(bad) - SHOWN} more bad rows in {path} ({len(bad)} of {total}); each is {self.shape}"
            bad = [*bad[:SHOWN], more]
        if not bad and not rows:
            bad = [f"path: '{path}' holds no row; each is {self.shape}"]
        _counts[_signature(path)] = None if bad else len(rows)
        return rows, bad


_counts: dict[tuple, Optional[int]] = {}  # (path, size, mtime_ns) -> its good rows' count (None: bad ones)


def _signature(path: str) -> tuple:
    """A file's path with its size and modification time (a directory's: its own), or the path alone."""
    try:
        stat = Path(path).stat()
    except OSError:
        return (str(path),)
    return (str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


def located_rows(source: Path) -> Iterator[tuple[str, object, Optional[str]]]:
    """(where, the row, why it does not read) for every row of ``source``; a file that does not read at
    all is one item ("", None, why, naming it)."""
    if not source.exists():
        yield "", None, f"nothing at '{source}' (a .jsonl or .parquet file, or a datasets directory)"
    elif source.is_dir():
        files = sorted(source.rglob("*.arrow"))
        if not files:
            yield "", None, f"'{source}' holds no .arrow file (a datasets directory, as save_to_disk writes it)"
        for file in files:
            yield from _table_rows(file, "Arrow")
    elif source.suffix in (".jsonl", ".parquet"):
        yield from _jsonl_rows(source) if source.suffix == ".jsonl" else _table_rows(source, "Parquet")
    else:
        yield "", None, f"'{source}' is not a .jsonl or .parquet file, nor a datasets directory (of .arrow files)"


def _jsonl_rows(source: Path) -> Iterator[tuple[str, object, Optional[str]]]:
    try:
        lines = source.read_bytes().splitlines()
    except OSError as err:
        yield "", None, f"'{source}' does not read ({err.strerror or err})"
        return
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            yield where, json.loads(line), None
        except UnicodeDecodeError as err:
            yield where, None, f"not UTF-8 text (byte {err.start + 1} of the line)"
        except json.JSONDecodeError as err:
            yield where, None, f"not JSON ({err.msg} at column {err.colno})"


def _table_rows(file: Path, kind: str) -> Iterator[tuple[str, object, Optional[str]]]:
    """The rows of a Parquet file or of an Arrow stream (a ``datasets`` file), by their index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if kind == "Parquet":
            rows = pq.read_table(file).to_pylist()
        else:
            with pa.memory_map(str(file)) as data:
                rows = pa.ipc.open_stream(data).read_all().to_pylist()
    except Exception as err:  # noqa: BLE001 - pyarrow raises its own types (ArrowInvalid, OSError, ...)
        yield "", None, f"'{file}' does not read as {kind} ({(str(err) or type(err).__name__).splitlines()[0]})"
        return
    for index, row in enumerate(rows):
        yield f"{file} row index {index}", row, None


def message_problem(key: str, message: object) -> Optional[str]:
    """Why ``message`` (``key``: where it sits, ``messages[2]``) is not a ``{role, content}`` turn."""
    if not isinstance(message, dict):
        return f"{key}: expected {{role, content}}, got {kind(message)}"
    role, content = message.get("role"), message.get("content")
    if role not in ROLES:
        said = "no role" if role is None else f"role {kind(role)}"
        return f"{key}: {said}; a role is one of {', '.join(ROLES)}"
    if not isinstance(content, str):
        return f"{key}.content: expected a string, got {kind(content)}"
    return None


def keys_of(row: dict) -> str:
    """A row's keys as a message names them: those with a value, then those null (a null counts as absent,
    and a message that hid it would send the reader to the wrong key)."""
    given = ", ".join(sorted(str(k) for k, v in row.items() if v is not None)) or "none"
    nulls = sorted(str(k) for k, v in row.items() if v is None)
    return given + (f"; {', '.join(nulls)}: null" if nulls else "")


def kind(value: object) -> str:
    """A value as a message shows it: its type and (the start of) its repr."""
    if value is None:
        return "null"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"
