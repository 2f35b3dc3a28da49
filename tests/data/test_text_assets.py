"""The text data that ships with the framework (framework/data/assets/): the harness tasks ask nothing
that the instruction data teaches (held-out modules and topics, no question's text in it), the
instruction data fits hf_lora_instructions' windows whole, and scripts/build_text_assets.py writes the
committed files again, byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from framework import compose
from framework.data.instructions import SHIPPED, InstructionsDataModule
from framework.rank.harness import SHIPPED_TASKS

ROOT = Path(__file__).resolve().parents[2]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def strings(value) -> list[str]:
    """Every string in a row, however deep in its lists and mappings."""
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for item in items for s in strings(item)]


def answers(examples: list[dict]) -> set[str]:
    """What the instruction data teaches to answer: each response and each assistant's turn."""
    return {e["response"] for e in examples if "response" in e} | {
        m["content"] for e in examples for m in e.get("messages", []) if m["role"] == "assistant"
    }


def test_no_question_of_a_shipped_harness_task_is_in_the_instruction_data():
    taught = "\n".join(s for example in rows(SHIPPED) for s in strings(example))
    checked = [s for path in sorted(SHIPPED_TASKS.glob("*.jsonl")) for row in rows(path) for s in strings(row)]
    long = [s for s in checked if len(s) >= 20]
    assert len(long) >= 60  # the descriptions and the long titles: a real check
    assert [s for s in long if s in taught] == []


def test_the_held_out_modules_and_topics_are_never_an_answer_of_the_instruction_data():
    taught = answers(rows(SHIPPED))
    modules = rows(SHIPPED_TASKS / "stdlib_modules.jsonl")
    named = {name for row in modules for name in row["choices"]}  # the distractors are held out too
    assert len(modules) >= 60 and len(taught) >= 100
    assert sorted(named & taught) == []
    assert sorted({row["title"] for row in rows(SHIPPED_TASKS / "stdlib_topics.jsonl")} & taught) == []
    # the answer task asks stdlib_modules' rows: the module each names is its choice at `answer`
    assert "stdlib.modules" in (SHIPPED_TASKS / "stdlib_modules_answer.yaml").read_text()


def test_every_shipped_example_fits_hf_lora_instructions_windows_whole():
    seq_len = compose(["experiment=hf_lora_instructions"])["datamodule"]["seq_len"]
    data = InstructionsDataModule(seq_len=seq_len, val_fraction=0, test_fraction=0)
    data.setup("fit")
    assert data.counts == {"examples": len(rows(SHIPPED)), "truncated": 0, "responses_cut": 0}


@pytest.mark.multiprocess
def test_the_build_script_writes_the_committed_files_again(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_text_assets.py"), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if "warning: Python" in done.stderr:
        pytest.skip(done.stderr.strip())  # another Python's docstrings: other files, rightly
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.jsonl"))
    expected = ["harness/stdlib_modules.jsonl", "harness/stdlib_topics.jsonl", "instructions.jsonl"]
    assert [str(p) for p in written] == expected
    for path in written:
        assert (tmp_path / path).read_bytes() == (SHIPPED.parent / path).read_bytes(), path
