"""datamodule=preferences: TRL's preference rows (text or conversations, .jsonl / .parquet / a datasets
directory) as batches of chosen rows then rejected rows, the answers' tokens the only targets; every bad
row named by file and line before start (and by the CLI, exit 2); the shipped set built from the
instruction set's training split, none of its questions in the harness tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from framework.config import ConfigError
from framework.data import PreferencesDataModule
from framework.data.preferences import SHIPPED

ROOT = Path(__file__).resolve().parents[2]
TEXT = {"prompt": "Which module parses JSON?", "chosen": "json", "rejected": "pickle"}
CONVERSATION = {
    "prompt": [
        {"role": "user", "content": "Name a module."},
        {"role": "assistant", "content": "os"},
        {"role": "user", "content": "Another?"},
    ],
    "chosen": [{"role": "assistant", "content": "sys"}],
    "rejected": [{"role": "assistant", "content": "a fish"}],
}


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _decoded(row: torch.Tensor) -> str:
    return bytes(int(t) for t in row if t >= 0).decode()


def _batch(path: Path, **options) -> list[torch.Tensor]:
    data = PreferencesDataModule(path=str(path), batch_size=2, val_fraction=0, test_fraction=0, **options)
    data.setup("fit")
    return data.train_set.collate([data.train_set[0], data.train_set[1]])


def test_the_answers_alone_are_the_targets_the_chosen_rows_first(tmp_path):
    inputs, targets = _batch(_jsonl(tmp_path / "pairs.jsonl", [TEXT, CONVERSATION]))
    assert inputs.shape == targets.shape and inputs.shape[0] == 4 and inputs.shape[1] % 8 == 0
    # chosen (text, conversation), then rejected in the same order; the turn's end is the answer's
    assert [_decoded(t) for t in targets] == ["json\n\n", "sys\n\n", "pickle\n\n", "a fish\n\n"]
    prompt = "### user:\nName a module.\n\n### assistant:\nos\n\n### user:\nAnother?\n\n### assistant:\n"
    assert _decoded(inputs[1]).startswith(prompt + "sys\n")  # (the prompt's assistant turn: rendered, not trained)
    # each target is the next token of the same row
    counted = targets[0] != -100
    assert torch.equal(targets[0][counted][:-1], inputs[0][1:][counted[:-1]][: int(counted.sum()) - 1])


def test_a_window_too_short_drops_the_prompt_first_then_the_answers_end_each_counted(tmp_path):
    long = {"prompt": "x" * 60, "chosen": "y" * 10, "rejected": "z" * 40}
    path = _jsonl(tmp_path / "p.jsonl", [long])
    data = PreferencesDataModule(path=str(path), seq_len=32, val_fraction=0, test_fraction=0)
    data.setup("fit")
    chosen_inputs, chosen_targets, rejected_inputs, rejected_targets = data.train_set[0]
    assert len(chosen_inputs) == len(rejected_inputs) == 32
    assert _decoded(chosen_targets) == "y" * 10 + "\n\n"  # the prompt's start dropped, the answer whole
    assert _decoded(rejected_targets) == "z" * 32  # only the answer left, cut at its end
    assert data.counts == {"answers": 2, "truncated": 2, "answers_cut": 1}


def test_parquet_and_a_datasets_directory_read_as_jsonl_does(tmp_path):
    datasets = pytest.importorskip("datasets")
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [TEXT, {**TEXT, "chosen": "marshal"}]
    expected = _batch(_jsonl(tmp_path / "pairs.jsonl", rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "pairs.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    for path in (tmp_path / "pairs.parquet", tmp_path / "saved"):
        assert all(torch.equal(a, b) for a, b in zip(_batch(path), expected)), path


BAD = [
    ({"prompt": "q", "chosen": "a"}, "line 1: no 'rejected' (its keys: chosen, prompt)"),
    ({"prompt": "q", "chosen": "a", "rejected": "a"}, "line 2: chosen and rejected are the same answer"),
    ({"prompt": "q", "chosen": 3, "rejected": "a"}, "line 3: chosen: expected a string, got int 3"),
    (
        {**CONVERSATION, "rejected": [{"role": "user", "content": "no"}]},
        "line 4: rejected: no assistant turn: nothing to prefer",
    ),
    ('{"prompt": "q", "chosen": "a",', "line 5: not JSON (Expecting property name enclosed in double quotes"),
    ({"prompt": [{"role": "user", "content": "q"}], "chosen": "a", "rejected": "b"}, "line 6: chosen: expected a list"),
]


def test_a_null_key_is_named_as_null_and_an_empty_answer_is_refused():
    """A null prompt had been refused as "(its keys: chosen, rejected)", and an empty answer trained in silence."""
    from framework.data.chat import row_problem
    from framework.data.preference_rows import pair_problem

    assert pair_problem({**TEXT, "prompt": None}).startswith("no 'prompt' (its keys: chosen, rejected; prompt: null)")
    assert row_problem({"prompt": None, "response": "json"}).startswith(
        "neither 'messages' nor 'prompt' and 'response' (its keys: response; prompt: null)"
    )
    empty = [{"role": "assistant", "content": " "}]
    for row, key in (({**TEXT, "chosen": ""}, "chosen"), ({**CONVERSATION, "rejected": empty}, "rejected")):
        assert (
            pair_problem(row) == f"{key}: an empty answer (no text, or white space only): nothing to prefer or reject"
        )


def test_every_bad_row_is_named_by_its_file_and_line_before_start_and_where_the_rank_reads_it(tmp_path):
    path = _jsonl(tmp_path / "bad.jsonl", [row for row, _ in BAD] + [TEXT])
    problems = PreferencesDataModule.check_config(path=str(path))
    assert len(problems) == 6  # five named, the rest counted
    for (_, said), problem in zip(BAD[:5], problems):
        assert problem.startswith(f"path: {path} {said}"), problem
    assert problems[5].startswith(f"path: 1 more bad rows in {path} (6 of 7)")
    with pytest.raises(ConfigError) as err:
        PreferencesDataModule(path=str(path)).setup("fit")
    assert err.value.problems[0].startswith(f"datamodule.path: {path} line 1: no 'rejected'")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(
        pytest.importorskip("pyarrow").Table.from_pylist([TEXT, {**TEXT, "rejected": "json"}]), tmp_path / "p.parquet"
    )
    [problem] = PreferencesDataModule.check_config(path=str(tmp_path / "p.parquet"))
    assert problem.startswith(f"path: {tmp_path / 'p.parquet'} row index 1: chosen and rejected are the same answer")


def test_a_bad_row_exits_2_before_start_naming_its_file_and_line(tmp_path):
    path = _jsonl(tmp_path / "bad.jsonl", [TEXT, TEXT, {"prompt": "q", "chosen": "a"}, {**TEXT, "rejected": "json"}])
    proc = subprocess.run(
        [sys.executable, "-m", "framework.train", "experiment=hf_dpo_preferences", f"datamodule.path={path}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"datamodule.path: {path} line 3: no 'rejected' (its keys: chosen, prompt)" in proc.stderr
    assert f"datamodule.path: {path} line 4: chosen and rejected are the same answer" in proc.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_the_shipped_set_is_the_scripts_from_the_instruction_training_split_never_a_harness_question():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import build_preferences as script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    shipped = [json.loads(line) for line in SHIPPED.read_text().splitlines()]
    assert shipped == script.preferences(script.training_rows(), script.harness_strings())  # (run it again)
    assert len(shipped) >= 60 and any(isinstance(r["prompt"], list) for r in shipped)
    held_out = script.harness_strings()
    assert held_out  # (the harness rows' string fields of 20 characters or more)
    questions = [r["prompt"] if isinstance(r["prompt"], str) else r["prompt"][-1]["content"] for r in shipped]
    assert not [(q, s) for q in questions for s in held_out if s in q]
    taught = {script.question_answer(row)[0][-1]["content"] for row in script.training_rows()}
    assert set(questions) <= taught  # only the instruction set's training questions
    assert PreferencesDataModule.check_config() == []


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    """A BPE tokenizer whose directory has ChatML's template (test_instructions.py's) and its two tokens."""
    pytest.importorskip("transformers")
    from tokenizers import AddedToken, Tokenizer

    from tests.data.test_instructions import CHATML
    from tests.helpers.corpora import bpe_tokenizer

    directory = tmp_path_factory.mktemp("chat")
    tokenizer = Tokenizer.from_file(str(bpe_tokenizer(tmp_path_factory.mktemp("bpe"))))
    tokenizer.add_special_tokens([AddedToken("<|im_start|>", special=True), AddedToken("<|im_end|>", special=True)])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML, "eos_token": "<|im_end|>"}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_under_a_chat_template_the_targets_are_trls_completion_tokens(chat_tokenizer, tmp_path):
    """TRL's conversational rows: the prompt rendered with the generation prompt, the completion what the
    whole conversation's rendering adds; here each answer's targets are those tokens exactly (the prompt's
    assistant turn rendered, not trained)."""
    transformers = pytest.importorskip("transformers")
    path = _jsonl(tmp_path / "pairs.jsonl", [CONVERSATION])
    data = PreferencesDataModule(str(path), tokenizer=str(chat_tokenizer), val_fraction=0, test_fraction=0)
    data.setup("fit")
    chosen_inputs, chosen_targets, rejected_inputs, rejected_targets = data.train_set[0]
    tok = transformers.AutoTokenizer.from_pretrained(chat_tokenizer)
    for answer, inputs, targets in (
        ("chosen", chosen_inputs, chosen_targets),
        ("rejected", rejected_inputs, rejected_targets),
    ):
        messages = CONVERSATION["prompt"] + CONVERSATION[answer]
        prefix = tok(tok.apply_chat_template(CONVERSATION["prompt"], tokenize=False, add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]  # fmt: skip
        full = tok(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False)["input_ids"]
        assert full[: len(prefix)] == prefix
        assert inputs.tolist() == full[:-1]
        assert targets.tolist() == [-100] * (len(prefix) - 1) + full[len(prefix) :]
