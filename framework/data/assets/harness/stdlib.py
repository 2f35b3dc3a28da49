"""The data of the harness tasks that ship with the framework, read from the .jsonl files beside this
file (written by scripts/build_text_assets.py from Python's own text), and the one metric of their
own. lm-eval calls these through the task YAMLs' ``custom_dataset`` and ``metric``."""

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def _test_split(name: str):
    import datasets

    rows = [json.loads(line) for line in (HERE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def modules(**_):
    return _test_split("stdlib_modules")


def topics(**_):
    return _test_split("stdlib_topics")


def bare_name(references, predictions, **_) -> float:
    """1.0 where the answer is a name alone (a dotted identifier), right or wrong: the form the instruction
    data teaches, apart from the knowledge (exact_match says whether it is the module's)."""
    return float(DOTTED_NAME.fullmatch(predictions[0]) is not None)
