"""Preference rows as TRL reads them, every one checked: ``{prompt, chosen, rejected}`` as plain text
(TRL's "standard" format), or as conversations (its "conversational" one: ``prompt`` a list of
``{role, content}`` messages, ``chosen`` and ``rejected`` lists holding the assistant's answer), in a
``.jsonl`` or ``.parquet`` file or a ``datasets`` directory, read as row_files.py reads the instruction
data's: a bad row named by its file and line, before start and again where the rank reads the file."""

from __future__ import annotations

from typing import Optional

from framework.data.row_files import RowFile, keys_of, kind, message_problem

SHAPE = (
    '{"prompt": str, "chosen": str, "rejected": str}, or conversations: {"prompt": [{"role", "content"}, ...], '
    '"chosen": [{"role": "assistant", "content": str}], "rejected": [...]}'
)
KEYS = ("prompt", "chosen", "rejected")


def pair_problem(row: object) -> Optional[str]:
    """Why ``row`` is not a preference pair (None: it is one). A key whose value is null counts as absent."""
    if not isinstance(row, dict):
        return f"expected an object ({SHAPE}), got {kind(row)}"
    missing = [key for key in KEYS if row.get(key) is None]
    if missing:
        return f"no {' and no '.join(repr(k) for k in missing)} (its keys: {keys_of(row)}); a row is {SHAPE}"
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
        return _empty_answer(key) if key != "prompt" and not value.strip() else None
    if isinstance(value, list) and key != "prompt":
        return f"{key}: a list of messages, but prompt is a string; give all three as text, or all three as messages"
    return f"{key}: expected a string, got {kind(value)}"


def _messages_problem(key: str, messages: object) -> Optional[str]:
    """Why ``messages`` (the row's ``key``) is not a list of messages, an answer holding the assistant's."""
    if not isinstance(messages, list):
        return f"{key}: expected a list of messages (as prompt is one), got {kind(messages)}"
    for i, message in enumerate(messages):
        problem = message_problem(f"{key}[{i}]", message)
        if problem:
            return problem
    if key != "prompt" and not any(m["role"] == "assistant" for m in messages):
        return f"{key}: no assistant turn: nothing to prefer (the loss counts the answer's assistant turns)"
    if key != "prompt" and not any(m["content"].strip() for m in messages if m["role"] == "assistant"):
        return _empty_answer(key)
    if key == "prompt" and not messages:
        return "prompt: an empty list; a prompt holds at least the user's message"
    return None


def _empty_answer(key: str) -> str:
    return f"{key}: an empty answer (no text, or white space only): nothing to prefer or reject"


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


# The preference pairs' rows: read and every one checked, before start and where the rank reads them.
PAIRS = RowFile(pair_problem, SHAPE)
