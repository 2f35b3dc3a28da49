"""Instruction examples as token ids with the loss on the responses only: each example's messages
(``{prompt, response}``, or ``{messages: [{role, content}, ...]}``) rendered by the tokenizer's chat
template (its directory's ``tokenizer_config.json`` or ``chat_template.jinja``, applied offline by
``transformers``) or by a template of the config's (``{role}`` and ``{content}``), tokenized, and
each token marked trained when it belongs to an assistant's turn: from the start of its content to
where the next message's rendering begins (its end-of-turn tokens included, as the prompt-prefix
way of masking has it).

Every row is checked as it is read (``EXAMPLES``: row_files.py), before start and again where the rank reads
it: a bad one is named by its file and line (a ``.jsonl``'s, counted from 1) or row index (a
``.parquet``'s or an ``.arrow`` file's, counted from 0 as ``datasets`` and pandas index them)."""

from __future__ import annotations

import json
import logging
import string
from typing import Optional

from framework.config.errors import ConfigError
from framework.data.row_files import RowFile, keys_of, kind, message_problem

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "### {role}:\n{content}\n\n"
SHAPE = '{"prompt": str, "response": str} or {"messages": [{"role": ..., "content": str}, ...]}'


def row_problem(row: object) -> Optional[str]:
    """Why ``row`` is not an example to train on (None: it is one). A key whose value is null counts
    as absent (a Parquet table of both shapes holds each row's other keys as nulls)."""
    if not isinstance(row, dict):
        return f"expected an object ({SHAPE}), got {kind(row)}"
    given = {key for key, value in row.items() if value is not None}
    if "messages" in given:
        return _messages_problem(row["messages"])
    if {"prompt", "response"} <= given:
        wrong = [key for key in ("prompt", "response") if not isinstance(row[key], str)]
        return f"{wrong[0]}: expected a string, got {kind(row[wrong[0]])}" if wrong else None
    return f"neither 'messages' nor 'prompt' and 'response' (its keys: {keys_of(row)}); a row is {SHAPE}"


def _messages_problem(messages: object) -> Optional[str]:
    """Why ``messages`` is not a conversation with an assistant's turn (None: it is one)."""
    if not isinstance(messages, list):
        return f"messages: expected a list of {{role, content}}, got {kind(messages)}"
    for i, message in enumerate(messages):
        problem = message_problem(f"messages[{i}]", message)
        if problem:
            return problem
    if not any(m["role"] == "assistant" for m in messages):
        roles = ", ".join(m["role"] for m in messages) or "no message"
        return f"no assistant turn ({roles}): nothing in it to train on (the loss counts the assistant's turns)"
    return None


# The instruction data's rows: read and every one checked, before start and where the rank reads them.
EXAMPLES = RowFile(row_problem, SHAPE)


def messages_of(example: dict, system: Optional[str] = None) -> list[dict]:
    """An example's conversation: its ``messages``, or a user's ``prompt`` and the assistant's ``response``."""
    if example.get("messages") is not None:  # (a row checked by row_problem: roles and contents as given)
        messages = [{"role": m["role"], "content": m["content"]} for m in example["messages"]]
    else:
        messages = [
            {"role": "user", "content": example["prompt"]},
            {"role": "assistant", "content": example["response"]},
        ]
    return ([{"role": "system", "content": system}] if system else []) + messages


# The files transformers saves a chat template to beside tokenizer_config.json.
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


class Renderer:
    """Conversations as text: the tokenizer's chat template (``tokenizer``: a model directory with one,
    in tokenizer_config.json or chat_template.jinja), else ``template`` (default ``DEFAULT_TEMPLATE``)."""

    def __init__(self, tokenizer: Optional[str] = None, template: Optional[str] = None, say: bool = True):
        problems = self.template_problems(template)
        if problems:
            raise ConfigError([f"datamodule.{p}" for p in problems])
        self.chat = None
        if template is None and tokenizer and _has_chat_template(tokenizer):
            from transformers import AutoTokenizer

            from framework.config.package_paths import model_directory

            self.chat = AutoTokenizer.from_pretrained(str(model_directory(tokenizer)), local_files_only=True)
        self.template = template or DEFAULT_TEMPLATE
        # which one renders is said once: a template the tokenizer lacks changes every loss (a warning: on the
        # console whatever the run's verbosity, framework-generate --chat's too)
        if say and tokenizer and template is None and self.chat is None:
            log.warning(
                "The tokenizer %s has no chat template: conversations are rendered by %r instead "
                "(datamodule.template sets another)",
                tokenizer,
                self.template,
            )
        elif say:
            log.info(
                "Conversations rendered by %s", f"{tokenizer}'s chat template" if self.chat else repr(self.template)
            )

    @classmethod
    def template_problems(cls, template: Optional[str]) -> list[str]:
        """``template`` (``datamodule.template``) as a format string of ``{role}`` and ``{content}`` alone,
        ``{content}`` among them; keyed relative to the datamodule."""
        if not isinstance(template, str):
            return []  # (null: the default; another type is named by the type check)
        fields = "the fields are {role} and {content}, e.g. " + repr(DEFAULT_TEMPLATE)
        try:
            parts = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)]
        except ValueError as err:
            return [f"template: {template!r} is not a format string ({err}; write a literal brace as {{{{ or }}}})"]
        named = [(name, spec, conversion) for name, spec, conversion in parts if name is not None]
        problems = [
            f"template: {{{name}}} is not a field; {fields}" for name, _, _ in named if name not in ("role", "content")
        ]
        problems += [
            f"template: {{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}: write the "
            f"field plain, {{{name}}}"
            for name, spec, conversion in named
            if name in ("role", "content") and (spec or conversion)
        ]
        if "content" not in [name for name, _, _ in named]:
            problems.append(
                f"template: {template!r} has no {{content}}: every message's text would be left out; {fields}"
            )
        return problems

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        if self.chat is not None:
            if not messages and not add_generation_prompt:
                return ""
            return self.chat.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        text = "".join(self.template.format(role=m["role"], content=m["content"]) for m in messages)
        return text + (self.template.split("{content}")[0].format(role="assistant") if add_generation_prompt else "")

    def trained_spans(self, messages: list[dict], first: int = 0) -> list[tuple[int, int]]:
        """The character spans of the assistant turns in ``render(messages)`` (those from message
        ``first`` on: a preference pair's answer, not the assistant's turns in its prompt)."""
        return [
            (len(self.render(messages[:i], add_generation_prompt=True)), len(self.render(messages[: i + 1])))
            for i, m in enumerate(messages)
            if m["role"] == "assistant" and i >= first
        ]


def _has_chat_template(tokenizer: str) -> bool:
    """Does the tokenizer's directory hold a chat template: in tokenizer_config.json, or in the file
    of its own that transformers (>= 4.43) saves it to (chat_template.jinja / .json)?"""
    from framework.config.package_paths import model_directory

    path = model_directory(tokenizer)
    folder = path if path.is_dir() else path.parent
    if any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES) or (folder / "chat_templates").is_dir():
        return True
    config = folder / "tokenizer_config.json"
    try:
        return bool(json.loads(config.read_text()).get("chat_template")) if config.is_file() else False
    except (OSError, ValueError):
        return False


def encode_example(
    renderer: Renderer, codec, messages: list[dict], eos: Optional[int], trained_from: int = 0
) -> tuple[list, list]:
    """(token ids, trained?) of one conversation: the rendered text's tokens, each trained when it
    starts inside an assistant's span (of the messages from ``trained_from`` on); with the config's
    template (a chat template ends its turns itself), the tokenizer's end of sequence after it
    (trained) when the last turn is the assistant's."""
    text = renderer.render(messages)
    spans = renderer.trained_spans(messages, trained_from)
    ids, starts = _tokens_with_offsets(codec, text)
    trained = [any(a <= s < b for a, b in spans) for s in starts]
    ending = renderer.chat is None and messages and messages[-1]["role"] == "assistant"
    if eos is not None and ending and (not ids or ids[-1] != eos):
        ids, trained = ids + [eos], trained + [True]
    return ids, trained


def _tokens_with_offsets(codec, text: str) -> tuple[list[int], list[int]]:
    """The text's token ids (no special tokens added: the template wrote its own) and where each
    starts in the text (a character index)."""
    if codec.tokenizer is None:  # bytes: each token a byte; its character is the one the byte belongs to
        ids, starts = [], []
        for i, ch in enumerate(text):
            encoded = ch.encode("utf-8")
            ids += list(encoded)
            starts += [i] * len(encoded)
        return ids, starts
    encoding = codec.tokenizer.encode(text, add_special_tokens=False)
    return list(encoding.ids), [start for start, _ in encoding.offsets]
