"""Built-in reward functions for ``task=grpo``, with TRL's signature: ``f(prompts, completions, **columns)
-> list[float | None]``, one value per completion (None: this function does not score it). Options of
their own come from the config: ``{function: framework.tasks.rewards.format, pattern: '...'}``.

A completion is a string, or (a prompt of messages) ``[{"role": "assistant", "content": ...}]``, as TRL
passes it; ``answer`` and the other columns are the prompt rows' own fields."""

from __future__ import annotations

import math
import re
from typing import Optional, Sequence

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_TAGGED = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def completion_text(completion) -> str:
    """The text of a completion: itself, or the content of its last message."""
    if isinstance(completion, list):
        return str(completion[-1].get("content", "")) if completion else ""
    return str(completion)


def final_number(text: str) -> Optional[float]:
    """The last number written in ``text`` (thousands' commas allowed), or None."""
    found = _NUMBER.findall(text)
    try:
        return float(found[-1].replace(",", "")) if found else None
    except ValueError:
        return None


def _answer_part(text: str) -> str:
    """The part of a completion that holds its answer: an ``<answer>...</answer>`` tag's content, else all."""
    tagged = _TAGGED.findall(text)
    return tagged[-1] if tagged else text


def accuracy(completions: Sequence, answer: Sequence, mode: str = "numeric", **kwargs) -> list[Optional[float]]:
    """1.0 where the completion's answer is the row's ``answer``, else 0.0 (None where the row has no
    answer). ``mode`` "numeric": the last number of the answer part (an ``<answer>`` tag's content, else
    the whole completion) equals the answer's number (to 1e-6 relative); "exact": the answer part,
    stripped, equals the answer's text, stripped."""
    if mode not in ("numeric", "exact"):
        raise ValueError(f"accuracy: mode={mode!r} is not one of numeric, exact")
    out = []
    for completion, expected in zip(completions, answer):
        if expected is None:
            out.append(None)
            continue
        part = _answer_part(completion_text(completion))
        if mode == "exact":
            out.append(float(part.strip() == str(expected).strip()))
            continue
        got, want = final_number(part), final_number(str(expected))
        out.append(float(got is not None and want is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)))
    return out


def format(completions: Sequence, pattern: str = r"\s*-?\d+(\.\d+)?\s*", **kwargs) -> list[float]:
    """1.0 where the whole completion matches the regular expression ``pattern`` (``re.fullmatch``, with
    ``.`` matching newlines), else 0.0. The default: a bare number and nothing else."""
    compiled = re.compile(pattern, re.DOTALL)
    return [float(compiled.fullmatch(completion_text(c)) is not None) for c in completions]


def length(completion_ids: Sequence, max_tokens: int, cache_tokens: int = 0, **kwargs) -> list[float]:
    """DAPO's soft overlong punishment (its R_length): 0 up to ``max_tokens - cache_tokens`` tokens, then
    falling linearly to -1 at ``max_tokens``, and -1 beyond it."""
    free = max_tokens - cache_tokens
    out = []
    for ids in completion_ids:
        n = len(ids)
        if n <= free:
            out.append(0.0)
        elif n <= max_tokens:  # (within the cache: cache_tokens > 0)
            out.append((free - n) / cache_tokens)
        else:
            out.append(-1.0)
    return out


def reasoning_gym(completions: Sequence, answer: Sequence, metadata: Sequence, question=None, **kwargs) -> list[float]:
    """reasoning-gym's own scorer of each row's dataset (``metadata['source_dataset']``, as
    datamodule=reasoning_gym keeps it) for the completion's answer part (pip install 'framework[rl]')."""
    import reasoning_gym as rg

    out = []
    for i, (completion, expected, meta) in enumerate(zip(completions, answer, metadata)):
        entry = {"question": question[i] if question else "", "answer": expected, "metadata": meta}
        score = rg.get_score_answer_fn(meta["source_dataset"])
        out.append(float(score(_answer_part(completion_text(completion)).strip(), entry)))
    return out
