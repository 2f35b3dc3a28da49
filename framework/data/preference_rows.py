"""Preference rows as TRL reads them, every one checked: ``{prompt, chosen, rejected}`` as plain text
(TRL's "standard" format), or as conversations (its "conversational" one: ``prompt`` a list of
``{role, content}`` messages, ``chosen`` and ``rejected`` lists holding the assistant's answer), in a
``.jsonl`` or ``.parquet`` file or a ``datasets`` directory (``save_to_disk``'s ``.arrow`` files).

A bad row is named by its file and line (a ``.jsonl``'s, counted from 1) or row index (a ``.parquet``'s
or an ``.arrow`` file's, counted from 0 as ``datasets`` and pandas index them), the first ``SHOWN`` one
by one and the rest counted: before start (the datamodule's ``check_config``) and again where the rank
reads the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator, Optional

from framework.config.errors import ConfigError

ROLES = ("system", "user", "assistant")
SHOWN = 5  # the bad rows a refusal names one by one (the rest are counted)
SHAPE = (
    '{"prompt": str, "chosen": str, "rejected": str}, or conversations: {"prompt": [{"role", "content"}, ...], '
    '"chosen": [{"role": "assistant", "content": str}], "rejected": [...]}'
)
KEYS = ("prompt", "chosen", "rejected")


def read_pairs(path: str, key: str = "datamodule.path") -> list[dict]:
    """The rows of ``path``, every one checked: ``ConfigError`` naming the bad ones (under ``key``)."""
    rows, problems = checked_pairs(path)
    if problems:
        raise ConfigError([f"{key}{p[len('path') :]}" for p in problems])
    return rows


def checked_pairs(path: str) -> tuple[list[dict], list[str]]:
    """(the rows of ``path`` that are preference pairs, the problems keyed relative to the datamodule:
    ``path: <file> line 3: ...``, or why the file does not read)."""
    rows, bad, total = [], [], 0
    for where, row, problem in located_rows(Path(path)):
        total += 1
        problem = problem or pair_problem(row)
        if problem:
            bad.append(f"path: {where}: {problem}" if where else f"path: {problem}")
        else:
            rows.append(row)
    if len(bad) > SHOWN:
        bad = [
            *bad[:SHOWN],
            f"path: {len(bad) - SHOWN} more bad rows in {path} ({len(bad)} of {total}); each is {SHAPE}",
        ]
    if not bad and not rows:
        bad = [f"path: '{path}' holds no row; each is {SHAPE}"]
    return rows, bad


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
    elif source.suffix == ".jsonl":
        yield from _jsonl_rows(source)
    elif source.suffix == ".parquet":
        yield from _table_rows(source, "Parquet")
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


def pair_problem(row: object) -> Optional[str]:
    """Why ``row`` is not a preference pair (None: it is one). A key whose value is null counts as absent."""
    if not isinstance(row, dict):
        return f"expected an object ({SHAPE}), got {_kind(row)}"
    missing = [key for key in KEYS if row.get(key) is None]
    if missing:
        keys = ", ".join(sorted(k for k, v in row.items() if v is not None)) or "none"
        return f"no {' and no '.join(repr(k) for k in missing)} (its keys: {keys}); a row is {SHAPE}"
    conversational = isinstance(row["prompt"], list)
    for key in KEYS:
        problem = _messages_problem(key, row[key]) if conversational else _text_problem(key, row[key])
        if problem:
            return problem
    if row["chosen"] == row["rejected"]:
        return (
            "chosen and rejected are the same answer: the pair prefers neither (its loss is log 2 whatever the model)"
        )
    return None


def _text_problem(key: str, value: object) -> Optional[str]:
    if isinstance(value, str):
        return None
    if isinstance(value, list) and key != "prompt":
        return f"{key}: a list of messages, but prompt is a string; give all three as text, or all three as messages"
    return f"{key}: expected a string, got {_kind(value)}"


def _messages_problem(key: str, messages: object) -> Optional[str]:
    """Why ``messages`` (the row's ``key``) is not a list of messages, an answer holding the assistant's."""
    if not isinstance(messages, list):
        return f"{key}: expected a list of messages (as prompt is one), got {_kind(messages)}"
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"{key}[{i}]: expected {{role, content}}, got {_kind(message)}"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            said = "no role" if role is None else f"role {_kind(role)}"
            return f"{key}[{i}]: {said}; a role is one of {', '.join(ROLES)}"
        if not isinstance(content, str):
            return f"{key}[{i}].content: expected a string, got {_kind(content)}"
    if key != "prompt" and not any(m["role"] == "assistant" for m in messages):
        return f"{key}: no assistant turn: nothing to prefer (the loss counts the answer's assistant turns)"
    if key == "prompt" and not messages:
        return "prompt: an empty list; a prompt holds at least the user's message"
    return None


def _kind(value: object) -> str:
    """A value as a message shows it: its type and (the start of) its repr."""
    if value is None:
        return "null"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def pair_messages(row: dict, system: Optional[str] = None) -> tuple[list[dict], list[dict], list[dict]]:
    """(the prompt's messages, the chosen answer's, the rejected one's) of a checked row: plain text as a
    user's turn and the assistant's answer (as datamodule=instructions renders ``{prompt, response}``),
    ``system`` first when given."""
    if isinstance(row["prompt"], str):
        prompt = [{"role": "user", "content": row["prompt"]}]
        answers = [[{"role": "assistant", "content": row[key]}] for key in ("chosen", "rejected")]
    else:
        prompt = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
        answers = [[{"role": m["role"], "content": m["content"]} for m in row[key]] for key in ("chosen", "rejected")]
    prompt = ([{"role": "system", "content": system}] if system else []) + prompt
    return prompt, answers[0], answers[1]
