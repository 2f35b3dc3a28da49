"""Prompt rows for reinforcement learning, as TRL's ``GRPOTrainer`` reads them, every one checked:
``{"prompt": str, <column>: ..., ...}`` (TRL's "standard" format: the text is the model's input as it is)
or ``{"prompt": [{role, content}, ...], ...}`` (its "conversational" one: rendered by the tokenizer's chat
template, an assistant's turn to follow). The other columns (``answer``, ``metadata``, ...) are passed to
the reward functions. Read as row_files.py reads the instruction data: a bad row named by its file and
line, before start and again where the rank reads the file."""

from __future__ import annotations

from typing import Optional

from framework.data.row_files import RowFile, kind, message_problem

SHAPE = (
    '{"prompt": str, <column>: <value>, ...} or {"prompt": [{"role": ..., "content": str}, ...], ...}: the '
    "columns (answer, ...) go to the reward functions"
)


def prompt_problem(row: object) -> Optional[str]:
    """Why ``row`` is not a prompt row (None: it is one)."""
    if not isinstance(row, dict):
        return f"expected an object ({SHAPE}), got {kind(row)}"
    if row.get("prompt") is None:
        said = "null" if "prompt" in row else "no 'prompt'"
        return f"prompt: {said} (its keys: {', '.join(sorted(row)) or 'none'}); a row is {SHAPE}"
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return None if prompt.strip() else "prompt: an empty string; a prompt holds the text to answer"
    if not isinstance(prompt, list):
        return f"prompt: expected a string or a list of messages, got {kind(prompt)}"
    if not prompt:
        return "prompt: an empty list; a prompt holds at least the user's message"
    for i, message in enumerate(prompt):
        problem = message_problem(f"prompt[{i}]", message)
        if problem:
            return problem
    if prompt[-1]["role"] == "assistant":
        return "prompt: its last message is the assistant's; the answer to sample follows a user's turn"
    return None


def prompt_messages(row: dict, system: Optional[str] = None) -> Optional[list[dict]]:
    """A conversational row's messages (``system`` first when given), or None for a prompt of plain text."""
    if isinstance(row["prompt"], str):
        return None
    messages = [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
    return ([{"role": "system", "content": system}] if system else []) + messages


# The prompt rows: read and every one checked, before start and where the rank reads them.
PROMPTS = RowFile(prompt_problem, SHAPE)
