"""Bad values that only the command line (Hydra's run directory, the packed launcher) or the
machine (a full disk) see: each refused before anything starts, with its key, said once."""

from __future__ import annotations

import errno

import pytest

from tests.e2e.test_cli import train
from tests.helpers.configs import TINY


def test_a_run_directory_that_cannot_be_created_is_named_not_a_traceback(tmp_path):
    proc = train("hydra.run.dir=/dev/null/x")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("hydra.run.dir: cannot create '/dev/null/x': '/dev/null' is a file") == 1


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "hydra.launcher.max_skips=abc",
            "hydra.launcher.max_skips: expected null (the device count) or a count >= 0, got 'abc'",
        ),
        (
            "hydra.launcher.max_skips=-1",
            "hydra.launcher.max_skips: expected null (the device count) or a count >= 0, got -1",
        ),
        ("hydra.launcher.devices=[0,0]", "hydra.launcher.devices: expected null, a count from 1 to"),
    ],
)
def test_the_packed_launcher_refuses_its_bad_values_once(tmp_path, value, message):
    proc = train("-m", "hydra/launcher=packed", value, f"hydra.sweep.dir={tmp_path / 'sweep'}", *TINY)
    assert proc.returncode == 2 and proc.stderr.count(message) == 1, proc.stderr


def test_a_full_disk_from_the_start_is_named_before_any_process_starts(tmp_path, monkeypatch):
    from framework import compose, fit
    from framework.config import ConfigError
    from framework.job import run

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run.OmegaConf, "save", full)
    with pytest.raises(ConfigError, match=r"output_dir: cannot write the run's config.yaml .*\(the disk is full\)"):
        fit(compose(TINY), output_dir=str(tmp_path / "run"))
    assert not (tmp_path / "run" / "results.json").exists()


# The language-model path as a careless user takes it (issue 61): the built-in GPT on instruction data.
INSTRUCTIONS = ["model=gpt/tiny", "datamodule=instructions", "task=language_modeling", "model.max_seq_len=256"]


def refused(proc, *messages: str) -> None:
    """Exit 2 before anything starts, each message said once, no traceback."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for message in messages:
        assert proc.stderr.count(message) == 1, proc.stderr[-3000:]


def test_a_bad_instruction_row_on_line_6_is_named_by_its_file_and_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"prompt": "q", "response": "a"}\n' * 5 + '{"prompt": "hi"\n')
    proc = train(*INSTRUCTIONS, f"datamodule.path={path}", f"hydra.run.dir={tmp_path / 'run'}")
    refused(proc, f"datamodule.path: {path} line 6: not JSON (Expecting ',' delimiter at column 16)")


def test_rows_without_an_assistant_turn_are_refused_before_they_train_on_nothing(tmp_path):
    path = tmp_path / "questions.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "a question"}]}\n' * 8)
    run = [*INSTRUCTIONS, f"datamodule.path={path}", "datamodule.batch_size=1", f"hydra.run.dir={tmp_path / 'run'}"]
    refused(
        train(*run),
        f"datamodule.path: {path} line 1: no assistant turn (user): nothing in it to train on",
        f"datamodule.path: 3 more bad rows in {path} (8 of 8)",
    )
    assert not (tmp_path / "run" / "results.json").exists()


def test_an_infinite_weight_of_a_mixture_is_named_by_its_key(tmp_path):
    from tests.helpers.configs import GPT_TINY
    from tests.helpers.corpora import prepared_help

    corpus = prepared_help(tmp_path)
    tokens = [*(o for o in GPT_TINY if not o.startswith("datamodule=")), "datamodule=tokens", "datamodule.seq_len=32"]
    proc = train(*tokens, f"datamodule.path=[{corpus},{corpus}]", "datamodule.weights=[inf,1]",
                 f"hydra.run.dir={tmp_path / 'run'}")  # fmt: skip
    refused(proc, "datamodule.weights: [inf, 1]; one positive number per corpus of datamodule.path (2), each finite")


def test_an_adapter_rank_of_a_billion_is_refused_before_it_allocates(tmp_path):
    """adapter.r=1e9 started the rank, which tried to allocate 128 GB for the adapters."""
    proc = train(*INSTRUCTIONS, "adapter=lora", "adapter.r=1000000000", f"hydra.run.dir={tmp_path / 'run'}")
    refused(
        proc,
        "adapter.r: 1000000000 makes about 4.48e+11 adapter parameters (r x (in + out) on each of its 8 linear layers)",
        "adapter.r: 1000000000, but B A's rank is at most min(in, out) of the layer it adapts",
    )
