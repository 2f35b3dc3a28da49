"""A newcomer who installed the framework alone (``pip install -e .``) and runs what needs an extra: told,
before anything starts, which extra to install (one line, exit 2, no traceback), nothing written."""

from __future__ import annotations

import sys

from tests.helpers.without import run_without


def test_a_hugging_face_experiment_without_transformers_names_the_extra(tmp_path):
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "framework.train", "experiment=hf_lora_instructions", f"hydra.run.dir={run_dir}"]
    proc = run_without(["transformers"], args, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Invalid configuration (1 problem)" in proc.stderr, proc.stderr
    assert "pip install 'framework[hf]' (or pip install transformers)" in proc.stderr, proc.stderr
    assert [p.name for p in run_dir.iterdir()] == ["train.log"]


def test_preparing_json_lines_without_pyarrow_names_the_extra(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "one document"}\n')
    args = [sys.executable, "-m", "framework.cli.prepare_data", f"input={corpus}", f"output={tmp_path / 'out'}"]
    proc = run_without(["pyarrow"], args, tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "framework-prepare-data: input: needs pyarrow (reading .jsonl files), which is not installed; "
        "pip install 'framework[data]' (or pip install pyarrow)"
    ]
    assert not (tmp_path / "out").exists()
