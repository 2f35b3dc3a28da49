"""datamodule=instructions refuses bad data before start, every row of it checked, each bad row named by
its file and line (or row index), and the same where the rank reads it; a template, a system prompt or a
seq_len that leaves nothing to train on is refused, and a cut that leaves some examples short is said on
the console, whatever the run's verbosity."""

from __future__ import annotations

import json

import pytest

from framework.config import ConfigError
from framework.data.chat import Renderer
from framework.data.instructions import SHIPPED, InstructionsDataModule

GOOD = {"prompt": "Which module parses JSON?", "response": "json"}
BAD = [
    '{"messages": [{"content": "no role"}]}',
    '{"messages": "hello"}',
    '{"prompt": "hi"',
    '{"messages": [{"role": "user", "content": "a question alone"}]}',
    '{"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}]}',
    '{"messages": [{"role": "user", "content": 3}, {"role": "assistant", "content": "x"}]}',
    '{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": null}]}',
    '{"prompt": ["a"], "response": "x"}',
]


def problems_of(path) -> list[str]:
    return InstructionsDataModule.check_config(path=str(path), val_fraction=0, test_fraction=0)


def written(tmp_path, lines: list[str], name: str = "rows.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_every_row_is_checked_and_the_first_five_bad_ones_named_by_file_and_line(tmp_path):
    path = written(tmp_path, [json.dumps(GOOD)] * 5 + BAD)
    problems = problems_of(path)
    assert problems[:5] == [
        f"path: {path} line 6: messages[0]: no role; a role is one of system, user, assistant",
        f"path: {path} line 7: messages: expected a list of {{role, content}}, got str 'hello'",
        f"path: {path} line 8: not JSON (Expecting ',' delimiter at column 16)",
        f"path: {path} line 9: no assistant turn (user): nothing in it to train on (the loss counts the "
        "assistant's turns)",
        f"path: {path} line 10: messages[0]: role str 'bot'; a role is one of system, user, assistant",
    ]
    assert problems[5].startswith(f'path: 3 more bad rows in {path} (8 of 13); each is {{"prompt": str')
    assert len(problems) == 6  # (the split's sizes are not counted on bad data)
    # the rest, each alone: an int, a null, a list where a string goes
    for line, message in [
        (BAD[5], "messages[0].content: expected a string, got int 3"),
        (BAD[6], "messages[1].content: expected a string, got null"),
        (BAD[7], "prompt: expected a string, got list ['a']"),
    ]:
        assert problems_of(written(tmp_path, [line])) == [f"path: {tmp_path / 'rows.jsonl'} line 1: {message}"]


def test_the_rank_refuses_the_rows_in_the_same_words(tmp_path):
    path = written(tmp_path, [json.dumps(GOOD)] * 5 + BAD[2:3])
    data = InstructionsDataModule(str(path), val_fraction=0, test_fraction=0)
    with pytest.raises(ConfigError) as err:
        data.setup("fit")
    assert err.value.problems == [f"datamodule.path: {path} line 6: not JSON (Expecting ',' delimiter at column 16)"]


def test_parquet_and_datasets_rows_are_named_by_their_index_and_an_unreadable_file_by_its_name(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [
        {**GOOD, "messages": None},
        {"prompt": None, "response": None, "messages": [{"role": "user", "content": "q"}]},
    ]
    rows.append({"prompt": None, "response": None, "messages": [{"role": "user", "content": "q"}, GOOD_TURN]})
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "rows.parquet")
    [problem] = problems_of(tmp_path / "rows.parquet")
    assert problem.startswith(f"path: {tmp_path / 'rows.parquet'} row index 1: no assistant turn (user)")
    directory = tmp_path / "saved"
    directory.mkdir()
    with pa.OSFile(str(directory / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    [problem] = problems_of(directory)
    assert problem.startswith(f"path: {directory / 'data-00000-of-00001.arrow'} row index 1: no assistant turn")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    [problem] = problems_of(tmp_path / "broken.parquet")
    assert problem.startswith(f"path: '{tmp_path / 'broken.parquet'}' does not read as Parquet (")


GOOD_TURN = {"role": "assistant", "content": "an answer"}


@pytest.mark.parametrize(
    "template, message",
    [
        ("{role}: no content", "template: '{role}: no content' has no {content}: every message's text"),
        ("{role} {foo} {content}", "template: {foo} is not a field; the fields are {role} and {content}"),
        ("{content", "template: '{content' is not a format string ("),
        ("{content!r}", "template: {content!r}: write the field plain, {content}"),
    ],
)
def test_a_template_is_a_format_string_of_role_and_content(template, message):
    assert any(p.startswith(message) for p in InstructionsDataModule.check_config(template=template))
    with pytest.raises(ConfigError, match="datamodule." + message.split(":")[0]):  # in the rank: the same
        Renderer(None, template)


def test_a_system_prompt_that_fills_a_window_is_refused_naming_both_keys():
    [problem] = InstructionsDataModule.check_config(system="x" * 300, seq_len=256)
    assert problem.startswith("system: its turn is 314 tokens, and a window holds seq_len=256: every example")
    assert "shorten datamodule.system or raise datamodule.seq_len" in problem
    assert InstructionsDataModule.check_config(system="Answer briefly.", seq_len=256) == []


def test_a_seq_len_that_leaves_every_example_only_its_responses_start_is_refused_in_setup(tmp_path):
    path = written(tmp_path, [json.dumps({"prompt": "q" * 20, "response": "a" * 40})] * 4)
    data = InstructionsDataModule(str(path), seq_len=16, val_fraction=0, test_fraction=0)
    with pytest.raises(ConfigError) as err:
        data.setup("fit")
    [problem] = err.value.problems
    assert problem.startswith("datamodule.seq_len: nothing to train on: each of the 4 training examples loses its")
    assert problem.endswith("(the longest is 88 tokens); raise datamodule.seq_len")
    data = InstructionsDataModule(str(path), seq_len=64, val_fraction=0, test_fraction=0)
    data.setup("fit")  # (their prompts' start cut alone: trained on, and said)
    assert data.counts == {"examples": 4, "truncated": 4, "responses_cut": 0}


def test_a_cut_is_said_on_the_console_when_the_runs_log_lines_are_not(tmp_path, capfd):
    """fit(verbose=False) keeps rank 0's log lines in train.log; its warnings reach stderr all the same."""
    from framework import compose, fit

    config = [
        "model=gpt/tiny", "datamodule=instructions", "task=language_modeling", "optimizer=adamw",
        "scheduler=none", "datamodule.seq_len=64", "model.max_seq_len=64", "trainer.max_steps=1",
        "trainer.limit_val_batches=1", "test=false", "trainer.enable_progress_bar=false", "logger=csv",
        "trainer.accelerator=cpu", "trainer.log_every_n_steps=1",
    ]  # fmt: skip
    fit(compose(config), output_dir=str(tmp_path / "run"), verbose=False)
    shown = capfd.readouterr()
    shipped = len(SHIPPED.read_text().splitlines())
    assert (
        f"WARNING: datamodule: {shipped} of {shipped} examples longer than seq_len=64 lost their earliest" in shown.err
    )
    assert "INFO" not in shown.out + shown.err  # (the log lines stay in the file)
    assert "lost their earliest prompt tokens" in (tmp_path / "run" / "train.log").read_text()
