"""Instruction examples as token ids with the loss on the responses only: each example's messages
(``{prompt, response}``, or ``{messages: [{role, content}, ...]}``) rendered by the tokenizer's chat
template (its directory's ``tokenizer_config.json`` or ``chat_template.jinja``, applied offline by
``transformers``) or by a template of the config's (``{role}`` and ``{content}``), tokenized, and
each token marked trained when it belongs to an assistant's turn: from the start of its content to
where the next message's rendering begins (its end-of-turn tokens included, as the prompt-prefix
way of masking has it)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

DEFAULT_TEMPLATE = "### {role}:\n{content}\n\n"


def read_examples(path: str) -> list[dict]:
    """The rows of a ``.jsonl`` or ``.parquet`` file, or of a ``datasets`` directory (``save_to_disk``)."""
    source = Path(path)
    if source.suffix == ".jsonl":
        return [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if source.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(source).to_pylist()
    import pyarrow as pa

    rows = []
    for file in sorted(source.rglob("*.arrow")):
        with pa.memory_map(str(file)) as data:
            rows += pa.ipc.open_stream(data).read_all().to_pylist()
    return rows


def messages_of(example: dict, system: Optional[str] = None) -> list[dict]:
    """An example's conversation: its ``messages``, or a user's ``prompt`` and the assistant's ``response``."""
    if "messages" in example:
        messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in example["messages"]]
    else:
        messages = [
            {"role": "user", "content": str(example["prompt"])},
            {"role": "assistant", "content": str(example["response"])},
        ]
    return ([{"role": "system", "content": system}] if system else []) + messages


# The files transformers saves a chat template to beside tokenizer_config.json.
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


class Renderer:
    """Conversations as text: the tokenizer's chat template (``tokenizer``: a model directory with one,
    in tokenizer_config.json or chat_template.jinja), else ``template`` (default ``DEFAULT_TEMPLATE``)."""

    def __init__(self, tokenizer: Optional[str] = None, template: Optional[str] = None):
        self.chat = None
        if template is None and tokenizer and _has_chat_template(tokenizer):
            from transformers import AutoTokenizer

            from framework.config.package_paths import model_directory

            self.chat = AutoTokenizer.from_pretrained(str(model_directory(tokenizer)), local_files_only=True)
        self.template = template or DEFAULT_TEMPLATE
        # which one renders is said once: a template the tokenizer lacks changes every loss
        log.info("Conversations rendered by %s", f"{tokenizer}'s chat template" if self.chat else repr(self.template))

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        if self.chat is not None:
            if not messages and not add_generation_prompt:
                return ""
            return self.chat.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        text = "".join(self.template.format(role=m["role"], content=m["content"]) for m in messages)
        return text + (self.template.split("{content}")[0].format(role="assistant") if add_generation_prompt else "")

    def trained_spans(self, messages: list[dict]) -> list[tuple[int, int]]:
        """The character spans of the assistant turns in ``render(messages)``."""
        return [
            (len(self.render(messages[:i], add_generation_prompt=True)), len(self.render(messages[: i + 1])))
            for i, m in enumerate(messages)
            if m["role"] == "assistant"
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


def encode_example(renderer: Renderer, codec, messages: list[dict], eos: Optional[int]) -> tuple[list, list]:
    """(token ids, trained?) of one conversation: the rendered text's tokens, each trained when it
    starts inside an assistant's span; with the config's template (a chat template ends its turns
    itself), the tokenizer's end of sequence after it (trained) when the last turn is the assistant's."""
    text = renderer.render(messages)
    spans = renderer.trained_spans(messages)
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
