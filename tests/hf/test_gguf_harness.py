"""A base model scored as it is: ``framework-evaluate model.path=<the GGUF file>`` with no checkpoint
scores SmolLM2-135M-Instruct on the shipped stdlib_modules task as ``lm_eval --model hf`` does on the
same file (``pretrained=<its directory>,gguf_file=<its name>``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from framework.rank.harness import SHIPPED_TASKS
from tests.helpers.smollm2 import GGUF, NAME, gguf_file

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("lm_eval")

LIMIT = 16  # questions of stdlib_modules (of 73), each of 4 choices: a model of 135M parameters on 2 cores


def test_framework_evaluate_scores_the_gguf_model_as_it_is_as_lm_eval_does(tmp_path):
    file = gguf_file()
    # (the environment of now, not of the import: the session's XDG_CACHE_HOME, never the user's ~/.cache)
    offline = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    ours = subprocess.run(
        [sys.executable, "-m", "framework.evaluate", f"model.path={GGUF}", "harness.tasks=[stdlib_modules]",
         f"harness.limit={LIMIT}", "test=false", f"hydra.run.dir={tmp_path / 'eval'}"],
        capture_output=True, text=True, timeout=900, env=offline,
    )  # fmt: skip
    assert ours.returncode == 0, ours.stderr[-3000:]
    theirs = subprocess.run(
        [sys.executable, "-m", "lm_eval", "--model", "hf", "--model_args",
         f"pretrained={file.parent},gguf_file={NAME},dtype=float32", "--tasks", "stdlib_modules",
         "--include_path", str(SHIPPED_TASKS), "--limit", str(LIMIT), "--batch_size", "8", "--device", "cpu",
         "--output_path", str(tmp_path / "lm_eval")],
        capture_output=True, text=True, timeout=900, env=offline,
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    results = json.loads((tmp_path / "eval" / "results.json").read_text())
    [their_file] = (tmp_path / "lm_eval").rglob("results_*.json")
    their_scores = json.loads(their_file.read_text())["results"]["stdlib_modules"]
    scored = results["harness"]["stdlib_modules"]
    assert scored["samples"] == LIMIT
    for metric in ("acc", "acc_norm"):
        assert scored[metric] == pytest.approx(their_scores[f"{metric},none"], abs=1e-12)
    assert results["experiment"] == "hf_pretrained" and results["steps"] == 0
    assert "harness_time_s" in results and "test_time_s" not in results  # the harness's time, not the test's
