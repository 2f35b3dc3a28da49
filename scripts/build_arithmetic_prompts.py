"""python scripts/build_arithmetic_prompts.py: writes framework/data/assets/arithmetic.jsonl, the prompt rows
datamodule=prompts ships with (task=grpo: answers a program checks). Each row is a user's question about two
whole numbers from 0 to 20 and one of +, -, *, and its ``answer``; every question once, drawn with a fixed seed,
so that the file is the same at every build (and the splits, drawn by datamodule.split_seed, never share one)."""

from __future__ import annotations

import json
import operator
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "framework" / "data" / "assets" / "arithmetic.jsonl"
OPERATIONS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


def rows(count: int = 1000, seed: int = 0) -> list[dict]:
    rng, seen, out = random.Random(seed), set(), []
    while len(out) < count:
        a, b, symbol = rng.randint(0, 20), rng.randint(0, 20), rng.choice(sorted(OPERATIONS))
        question = f"What is {a} {symbol} {b}?"
        if question in seen:
            continue
        seen.add(question)
        out.append({"prompt": [{"role": "user", "content": question}], "answer": str(OPERATIONS[symbol](a, b))})
    return out


if __name__ == "__main__":
    OUT.write_text("".join(json.dumps(row) + "\n" for row in rows()))
    print(f"{OUT}: {len(rows())} rows")
