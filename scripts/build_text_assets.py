"""Write the text data that ships with the framework, from text that ships with Python itself:

- the lm-evaluation-harness tasks (framework/data/assets/harness/): ``stdlib_modules``, which module
  of the standard library a docstring's first line describes (four choices, scored by log-likelihood),
  and ``stdlib_topics``, the title of a help topic of ``pydoc_data.topics`` given its name (scored by
  the exact match of a generation);
- the instruction set of ``datamodule=instructions`` (instructions.jsonl in framework/data/assets/): the
  same facts as questions and answers, ``{prompt, response}``, and as two-turn conversations
  (``{messages}``).

    python scripts/build_text_assets.py      # rewrites the .jsonl files (Python 3.11's text)

The files are committed: a score, or a run, means the same data on every Python version.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import random
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "framework" / "data" / "assets" / "harness"


def module_lines() -> dict[str, str]:
    """Each pure-Python public module's docstring's first line (read from its source, not imported)."""
    lines = {}
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_") or name in ("this", "antigravity"):
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None) if spec else None
        if not origin or not origin.endswith(".py"):
            continue
        doc = ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8", errors="replace")))
        first = (doc or "").strip().splitlines()[0].strip() if doc else ""
        if 25 <= len(first) <= 100 and name.lower() not in first.lower() and "copyright" not in first.lower():
            lines[name] = first
    return lines


def modules_task() -> list[dict]:
    lines = module_lines()
    names = list(lines)
    rows = []
    for i, name in enumerate(names):
        rng = random.Random(i)
        choices = rng.sample([n for n in names if n != name], 3) + [name]
        rng.shuffle(choices)
        rows.append({"description": lines[name], "choices": choices, "answer": choices.index(name)})
    return rows


def topics_task() -> list[dict]:
    from pydoc_data.topics import topics

    return [{"topic": key, "title": topics[key].strip().splitlines()[0].strip()} for key in sorted(topics)]


def instructions() -> list[dict]:
    """Questions and answers of the module descriptions and help topics; every fourth a conversation."""
    rows = [
        {"prompt": f'Which module of Python\'s standard library is described as "{line}"?', "response": name}
        for name, line in module_lines().items()
    ]
    rows += [{"prompt": f"What is the title of Python's help topic '{t['topic']}'?", "response": t["title"]}
             for t in topics_task()]  # fmt: skip
    for i, row in enumerate(rows):
        if i % 4 == 3:  # a conversation: the question, the answer, and the answer again asked as a check
            rows[i] = {"messages": [
                {"role": "user", "content": row["prompt"]},
                {"role": "assistant", "content": row["response"]},
                {"role": "user", "content": "Say it again, in one line."},
                {"role": "assistant", "content": row["response"]},
            ]}  # fmt: skip
    return rows


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("stdlib_modules", modules_task()), ("stdlib_topics", topics_task())):
        path = OUT / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} questions")
    path = OUT.parent / "instructions.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in instructions()), encoding="utf-8")
    print(f"{path}: {len(instructions())} examples")


if __name__ == "__main__":
    main()
