"""Write the text data that ships with the framework, from text that ships with Python itself, split
so that the evaluation never asks what the instruction data taught:

- the lm-evaluation-harness tasks (framework/data/assets/harness/), on held-out modules and topics:
  ``stdlib_modules``, which module of the standard library a docstring's first line describes (four
  choices, scored by log-likelihood; the same rows feed ``stdlib_modules_answer``, the module's name
  generated as the answer to the instruction data's question in a chat), and ``stdlib_topics``, the
  title of a help topic of ``pydoc_data.topics`` given its name (the exact match of a generation);
- the instruction set of ``datamodule=instructions`` (instructions.jsonl in framework/data/assets/), on
  the other modules and topics: questions and answers, ``{prompt, response}``, and every fourth a
  two-turn conversation (``{messages}``).

A module goes with its top-level package (``email.mime.text`` with ``email``), and a topic with the
topics of its first word (``atom-literals`` with ``atom-identifiers``) and of its title (``else`` with
``if``): siblings describe alike, so a split inside a package would leak. Which side a package or
topic group is on is a fixed rule, a hash of its name, so a module keeps its side whatever else a
Python version adds or drops.

    python scripts/build_text_assets.py [OUTPUT_ROOT]   # rewrites the .jsonl files (Python 3.11.7's text)

The files are committed: a score, or a run, means the same data on every Python version.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import json
import pkgutil
import random
import sys
import warnings
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "framework" / "data" / "assets"
PYTHON = "3.11.7"  # the Python that wrote the committed files (tests/data/test_text_assets.py rebuilds them)
HELD_OUT = 0.5  # the share of packages and topic groups the harness tasks hold out
SALT = "stdlib-split-2"  # the first of the salts tried that splits both pools about evenly
# not the library a user reads about: easter eggs, the test suite, the IDE's and 2to3's internals, and
# generated codecs (whose docstrings name their source tables)
SKIPPED = {"this", "antigravity", "test", "idlelib", "lib2to3", "turtledemo", "ensurepip", "encodings"}
QUESTION = 'Which module of Python\'s standard library is described as "{}"?'
TOPIC_QUESTION = "What is the title of Python's help topic '{}'?"


def held_out(group: str) -> bool:
    """Whether a package (or topic group) is the harness's: a hash of its name, not a draw of the pool."""
    return hashlib.sha256(f"{SALT}:{group}".encode()).digest()[0] < 256 * HELD_OUT


def _public(name: str) -> bool:
    part = name.rpartition(".")[2]
    return not part.startswith("_") and part not in ("test", "tests", "idle_test") and not part.startswith("test_")


def public_modules() -> list[str]:
    """The standard library's public modules and their public submodules, found on disk (none imported)."""
    names = []
    for top in sorted(sys.stdlib_module_names - SKIPPED):
        spec = importlib.util.find_spec(top) if _public(top) else None
        if spec is None:
            continue
        names.append(top)
        pending = [(top, spec.submodule_search_locations)] if spec.submodule_search_locations else []
        while pending:
            package, paths = pending.pop()
            for info in pkgutil.iter_modules(paths, prefix=package + "."):
                if _public(info.name):
                    names.append(info.name)
                    if info.ispkg:
                        pending.append((info.name, [str(Path(info.module_finder.path) / info.name.rpartition(".")[2])]))
    return sorted(names)


def docstring(name: str) -> str:
    """A module's docstring: parsed from its source, or imported (a C extension, a built-in, frozen)."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None) or ""
    if origin.endswith(".py"):
        return ast.get_docstring(ast.parse(Path(origin).read_text(encoding="utf-8", errors="replace"))) or ""
    with warnings.catch_warnings():  # (deprecated modules warn on import)
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name).__doc__ or ""
        except ImportError:
            return ""


def module_lines() -> dict[str, str]:
    """Each module's docstring's first line, where it says enough without naming the module: 25 to 100
    characters, none of the name's parts in it, no licence line, no other module's line alike."""
    lines = {}
    for name in public_modules():
        text = docstring(name).strip()
        first = text.splitlines()[0].strip() if text else ""
        told = any(part.lower() in first.lower() for part in name.split("."))
        if 25 <= len(first) <= 100 and not told and "copyright" not in first.lower():
            lines[name] = first
    counts = {}
    for first in lines.values():
        counts[first] = counts.get(first, 0) + 1
    return {name: first for name, first in lines.items() if counts[first] == 1}


def topics() -> list[dict]:
    from pydoc_data.topics import topics

    return [{"topic": key, "title": topics[key].strip().splitlines()[0].strip()} for key in sorted(topics)]


def split() -> tuple[dict, dict, list, list]:
    """(training modules, held-out modules, training topics, held-out topics): {name: line} and rows."""
    lines = module_lines()
    train = {n: line for n, line in lines.items() if not held_out(n.partition(".")[0])}
    held = {n: line for n, line in lines.items() if held_out(n.partition(".")[0])}
    rows = topics()
    first = {}  # topics of one title go together ("else" with "if"), with the first's group
    for t in rows:
        first.setdefault(t["title"], t["topic"])
    held_topics = [t for t in rows if held_out("topic:" + first[t["title"]].partition("-")[0])]
    return train, held, [t for t in rows if t not in held_topics], held_topics


def modules_task(held: dict) -> list[dict]:
    """Four choices a question, the distractors held-out modules too (no choice is an answer the
    instruction data teaches)."""
    names = sorted(held)
    rows = []
    for name in names:
        rng = random.Random(name)
        choices = rng.sample([n for n in names if n != name], 3) + [name]
        rng.shuffle(choices)
        rows.append({"description": held[name], "choices": choices, "answer": choices.index(name)})
    return rows


def instructions(train: dict, train_topics: list) -> list[dict]:
    """Questions and answers of the training modules and topics; every fourth a conversation."""
    rows = [{"prompt": QUESTION.format(line), "response": name} for name, line in train.items()]
    rows += [{"prompt": TOPIC_QUESTION.format(t["topic"]), "response": t["title"]} for t in train_topics]
    for i, row in enumerate(rows):
        if i % 4 == 3:  # a conversation: the question, the answer, and the answer again asked as a check
            rows[i] = {"messages": [
                {"role": "user", "content": row["prompt"]},
                {"role": "assistant", "content": row["response"]},
                {"role": "user", "content": "Say it again, in one line."},
                {"role": "assistant", "content": row["response"]},
            ]}  # fmt: skip
    return rows


def write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    print(f"{path}: {len(rows)} rows")


def main(root: Path = ASSETS) -> None:
    import platform

    if platform.python_version() != PYTHON:
        print(f"warning: Python {platform.python_version()}, not {PYTHON}: the text may differ", file=sys.stderr)
    train, held, train_topics, held_topics = split()
    write(root / "harness" / "stdlib_modules.jsonl", modules_task(held))
    write(root / "harness" / "stdlib_topics.jsonl", held_topics)
    write(root / "instructions.jsonl", instructions(train, train_topics))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ASSETS)
