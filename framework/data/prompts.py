"""Prompts for generation: each encoded, the set padded on the left to its longest (generation trims
each batch to the batch's own longest), with an attention mask and each prompt's index (the seed of
its draws when generation samples); and predictions.jsonl's rows of what was generated after them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
from torch.utils.data import Dataset


class Prompts(Dataset):
    """Samples ``{"input_ids", "attention_mask", "index"}``; ``encoded``: each prompt's token ids (at
    least one), ``pad``: the id the padding holds (never attended)."""

    def __init__(self, encoded: list[list[int]], pad: int):
        longest = max(len(e) for e in encoded)
        self.input_ids = torch.tensor([[pad] * (longest - len(e)) + list(e) for e in encoded], dtype=torch.long)
        self.attention_mask = torch.tensor([[False] * (longest - len(e)) + [True] * len(e) for e in encoded])

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, i: int) -> dict:
        return {
            "input_ids": self.input_ids[i],
            "attention_mask": self.attention_mask[i],
            "index": torch.tensor(i),
        }


def prompt_ids(codec, text: str) -> list[int]:
    """``text``'s tokens by ``codec`` (framework/data/text.py); an empty prompt starts from the
    tokenizer's beginning of sequence, else its end of sequence (as lm-evaluation-harness does), for
    bytes a newline."""
    special = codec.special
    start = [special["bos"]] if special["bos"] is not None else special["eos"][:1]
    return codec.encode(text) or start or [10]


def prompt_set(codec, prompts: list[str]) -> Prompts:
    return Prompts([prompt_ids(codec, p) for p in prompts] or [prompt_ids(codec, "")], codec.pad)


def records(codec, prompts: list[str], predictions) -> list[dict]:
    """predictions.jsonl's rows: each prompt, the text generated after it (decoded by ``codec``, up to
    its end of sequence) and those tokens."""
    generated = predictions["generated"] if isinstance(predictions, dict) else predictions
    rows = []
    for i, row in enumerate(generated.tolist()):
        tokens = codec.continuation(row)
        prompt = prompts[i] if i < len(prompts) else ""
        rows.append({"prompt": prompt, "continuation": codec.decode(tokens), "tokens": tokens})
    return rows


class PromptsToContinue:
    """For a datamodule of token ids with a ``codec`` (data/text.py's Codec) and ``predict_prompts``:
    what generation reads of its tokens, and predictions.jsonl's rows."""

    @property
    def special_tokens(self) -> dict:
        """The tokenizer's end of sequence (``eos``, a list) and ``pad`` ids, for generation."""
        return {"eos": list(self.codec.special["eos"]), "pad": self.codec.pad}

    def prediction_records(self, predictions) -> list[dict]:
        """predictions.jsonl's rows: each prompt (none for a test window), its continuation and its tokens."""
        return records(self.codec, self.predict_prompts or [], predictions)


def read_prompts(path: Optional[str]) -> Optional[list[str]]:
    """The prompts of a file: a .jsonl's ``prompt`` of each line, else each non-empty line of text
    (None: no file)."""
    if not path:
        return None
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if str(path).endswith(".jsonl"):
        return [json.loads(line)["prompt"] for line in lines if line.strip()]
    return [line for line in lines if line.strip()]


def prompt_file_problems(path: Optional[str]) -> list[str]:
    """``predict_file`` is readable and holds prompts."""
    if not path:
        return []
    try:
        prompts = read_prompts(path)
    except (OSError, UnicodeDecodeError) as err:
        return [f"predict_file: cannot read '{path}' ({err.strerror if isinstance(err, OSError) else err})"]
    except (ValueError, KeyError, TypeError):
        return [f"predict_file: '{path}' is not a .jsonl of {{\"prompt\": ...}} lines"]
    return [] if prompts else [f"predict_file: '{path}' holds no prompt"]
