"""Write the preference set that ships with the framework (preferences.jsonl in framework/data/assets/), for
``datamodule=preferences``, from the instruction set as it is when this runs:

- only the rows of the instruction set's training split (datamodule=instructions' default val_fraction,
  test_fraction and split_seed), and none whose question holds a string of 20 characters or more of the
  lm-evaluation-harness tasks that ship (framework/data/assets/harness/*.jsonl): the scores stay on
  questions the model never trained on;
- each question's right answer chosen, and rejected a plausible wrong one: the answer of another training
  question of the same kind (another module's name, another help topic's title), drawn by a seed of the
  question's own, so a row does not change when others come or go;
- a ``{prompt, response}`` row becomes ``{prompt, chosen, rejected}`` in text; a conversation
  (``{messages}``) becomes TRL's conversational form: its turns up to the first answer the prompt, that
  answer chosen, the wrong one rejected.

    python scripts/build_preferences.py   # rewrites preferences.jsonl (again after instructions.jsonl changes)
"""

from __future__ import annotations

import inspect
import json
import random
import re
import zlib
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "framework" / "data" / "assets"
HELD_OUT_CHARS = 20  # a harness string this long or longer never appears in a question


def strings(value) -> list[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def harness_strings(folder: Path = ASSETS / "harness") -> set[str]:
    """The string fields of 20 characters or more of the shipped harness tasks' rows."""
    rows = [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.read_text().splitlines() if line]
    return {s for row in rows for s in strings(row) if len(s) >= HELD_OUT_CHARS}


def question_answer(row: dict) -> tuple[list[dict], str]:
    """(the prompt's messages, up to the first answer; that answer) of an instruction row."""
    if "messages" in row:
        first = next(i for i, m in enumerate(row["messages"]) if m["role"] == "assistant")
        return row["messages"][:first], row["messages"][first]["content"]
    return [{"role": "user", "content": row["prompt"]}], row["response"]


def kind(question: str) -> str:
    """What a question asks, to draw a wrong answer of the same sort: its words before the first quote."""
    return re.split("[\"']", question, maxsplit=1)[0]


def training_rows(path: Path = ASSETS / "instructions.jsonl") -> list[dict]:
    """The rows of datamodule=instructions' training split of ``path``, in the file's order."""
    from framework.data.base import split_indices
    from framework.data.instructions import InstructionsDataModule

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    defaults = inspect.signature(InstructionsDataModule.__init__).parameters
    fractions = [defaults["val_fraction"].default, defaults["test_fraction"].default]
    train = split_indices(len(rows), fractions, defaults["split_seed"].default)[-1]
    return [rows[i] for i in sorted(train)]


def preferences(rows: list[dict], held_out: set[str]) -> list[dict]:
    """A pair for each row whose question holds no held-out string: its answer against another's."""
    asked = [question_answer(row) for row in rows]
    answers: dict[str, list[str]] = {}
    for messages, answer in asked:
        answers.setdefault(kind(messages[-1]["content"]), []).append(answer)
    out = []
    for row, (messages, answer) in zip(rows, asked):
        question = messages[-1]["content"]
        others = sorted({a for a in answers[kind(question)] if a != answer})
        if not others or any(s in m["content"] for m in messages for s in held_out):
            continue
        wrong = random.Random(zlib.crc32(question.encode())).choice(others)
        if "messages" in row:
            pair = [[{"role": "assistant", "content": text}] for text in (answer, wrong)]
            out.append({"prompt": messages, "chosen": pair[0], "rejected": pair[1]})
        else:
            out.append({"prompt": question, "chosen": answer, "rejected": wrong})
    return out


def main() -> None:
    rows = preferences(training_rows(), harness_strings())
    path = ASSETS / "preferences.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    conversations = sum(isinstance(r["prompt"], list) for r in rows)
    print(f"{path}: {len(rows)} pairs ({conversations} conversations)")


if __name__ == "__main__":
    main()
