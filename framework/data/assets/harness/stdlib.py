"""The data of the harness tasks that ship with the framework, read from the .jsonl files beside this
file (written by scripts/build_text_assets.py from Python's own text). lm-eval calls these through
the task YAMLs' ``custom_dataset``."""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _test_split(name: str):
    import datasets

    rows = [json.loads(line) for line in (HERE / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def modules(**_):
    return _test_split("stdlib_modules")


def topics(**_):
    return _test_split("stdlib_topics")
