"""Prompts for generation: each encoded, the set padded on the left to its longest (generation trims
each batch to the batch's own longest), with an attention mask and each prompt's index (the seed of
its draws when generation samples); and predictions.jsonl's rows of what was generated after them."""

from __future__ import annotations

import json
from typing import Optional

import torch
from torch.utils.data import Dataset


class Prompts(Dataset):
    """Samples ``{"input_ids", "attention_mask", "index"}``, each of its prompt's own length; a batch
    (``collate``) is padded on the left to its own longest prompt only, so one long prompt costs its
    batch, not the set. ``encoded``: each prompt's token ids (at least one), ``pad``: the id the
    padding holds (never attended)."""

    def __init__(self, encoded: list[list[int]], pad: int):
        self.encoded = [torch.tensor(list(e), dtype=torch.long) for e in encoded]
        self.pad = pad

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int) -> dict:
        ids = self.encoded[i]
        return {"input_ids": ids, "attention_mask": torch.ones(len(ids), dtype=torch.bool), "index": torch.tensor(i)}

    def collate(self, samples: list[dict]) -> dict:
        longest = max(len(s["input_ids"]) for s in samples)
        ids = torch.full((len(samples), longest), self.pad, dtype=torch.long)
        mask = torch.zeros((len(samples), longest), dtype=torch.bool)
        for k, sample in enumerate(samples):
            n = len(sample["input_ids"])
            ids[k, longest - n :], mask[k, longest - n :] = sample["input_ids"], True
        return {"input_ids": ids, "attention_mask": mask, "index": torch.stack([s["index"] for s in samples])}


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
    what generation reads of its tokens, predictions.jsonl's rows, and the check of its ``predict_file``."""

    @property
    def special_tokens(self) -> dict:
        """The tokenizer's end of sequence (``eos``, a list) and ``pad`` ids, for generation."""
        return {"eos": list(self.codec.special["eos"]), "pad": self.codec.pad}

    def prediction_records(self, predictions) -> list[dict]:
        """predictions.jsonl's rows: each prompt (none for a test window), its continuation and its tokens."""
        return records(self.codec, self.predict_prompts or [], predictions)

    @classmethod
    def prompt_file_problems(cls, path: Optional[str]) -> list[str]:
        """``predict_file`` is readable and holds prompts (every line checked), before start."""
        try:
            read_prompts(path)
        except PromptFileError as err:
            return [f"predict_file: {problem}" for problem in err.problems]
        return []


class PromptFileError(ValueError):
    """A prompt file that does not read as prompts: ``problems`` name its lines."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


SHOWN = 5  # the problems named one by one; the rest are counted


def read_prompts(path: Optional[str]) -> Optional[list[str]]:
    """The prompts of a file: a .jsonl's ``prompt`` of each line (a string), else each non-empty line
    of text (None: no file). Read once (a pipe, ``/dev/stdin``, reads once only). Raises
    ``PromptFileError`` naming the file's bad lines (the first few, and how many more)."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:  # (not Path.read_text: one read of a pipe, as of a file)
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise PromptFileError([f"cannot read '{path}' ({reason})"]) from None
    if not str(path).endswith(".jsonl"):
        prompts = [line for line in lines if line.strip()]
    else:
        prompts, bad = [], []
        for number, line in enumerate(lines, 1):
            if line.strip():
                prompt, problem = _jsonl_prompt(line)
                prompts.append(prompt)
                bad += [f"'{path}' line {number}: {problem}"] if problem else []
        if bad:
            more = [f"'{path}': {len(bad) - SHOWN} more lines like these"] if len(bad) > SHOWN else []
            raise PromptFileError(bad[:SHOWN] + more)
    if not prompts:
        raise PromptFileError([f"'{path}' holds no prompt"])
    return prompts


def _jsonl_prompt(line: str) -> tuple[str, Optional[str]]:
    """A .jsonl line's prompt, or what is wrong with the line."""
    try:
        row = json.loads(line)
    except ValueError as err:
        return "", f"not JSON ({err})"
    if not isinstance(row, dict) or "prompt" not in row:
        return "", 'expected an object with "prompt" (a string), e.g. {"prompt": "def "}'
    if not isinstance(row["prompt"], str):
        return "", f'"prompt" is {type(row["prompt"]).__name__} {row["prompt"]!r}, expected a string'
    return row["prompt"], None
