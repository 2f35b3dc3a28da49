"""framework-prepare-data: the shards hold the corpus's tokens exactly, whatever the number of
workers; a second run changes nothing, a stopped run resumes, new inputs append, and what differs
from the prepared corpus is refused, naming it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from framework.cli.prepare_data import parse
from framework.config import ConfigError
from framework.data import prepare_pieces
from framework.data.prepare import PrepareSettings, Stopped, prepare
from framework.data.token_shards import offsets_file, read_index
from tests.helpers.corpora import bpe_tokenizer, help_text, stream

pa = pytest.importorskip("pyarrow")
pytestmark = pytest.mark.multiprocess  # (workers: spawned processes)


def files_of(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted((directory / "shards").iterdir())}


def test_bytes_of_a_text_file_are_the_file_and_workers_change_no_byte(tmp_path):
    text = help_text(tmp_path)
    one = prepare(
        PrepareSettings(
            input=[str(text)], output=str(tmp_path / "one"), workers=1, piece_mb=0.05, val_fraction=0, test_fraction=0
        )
    )
    assert one["dtype"] == "uint16" and one["vocab_size"] == 256 and len(one["splits"]["train"]) > 5
    assert stream(tmp_path / "one").astype(np.uint8).tobytes() == text.read_bytes()
    # documents are the paragraphs: their offsets in the stream are where each paragraph starts
    starts = [np.load(offsets_file(tmp_path / "one" / s["file"])) for s in one["splits"]["train"]]
    assert sum(len(s) for s in starts) == one["documents"] == text.read_text().count("\n\n") + 1
    two = prepare(
        PrepareSettings(
            input=[str(text)], output=str(tmp_path / "two"), workers=2, piece_mb=0.05, val_fraction=0, test_fraction=0
        )
    )
    assert files_of(tmp_path / "one") == files_of(tmp_path / "two") and one["splits"] == two["splits"]


def test_splits_are_by_document_and_a_second_run_is_a_no_op(tmp_path, capsys):
    settings = PrepareSettings(
        input=[str(help_text(tmp_path))], output=str(tmp_path / "out"), workers=1, val_fraction=0.1, test_fraction=0.1
    )
    index = prepare(settings)
    counts = index["tokens"]
    assert counts["val"] > 0 and counts["test"] > 0 and sum(counts.values()) == (tmp_path / "help.txt").stat().st_size
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")}
    assert prepare(settings) == index
    assert "up to date" in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "out").rglob("*")} == before


def test_a_stopped_run_resumes_with_the_pieces_it_had(tmp_path, monkeypatch, capsys):
    settings = PrepareSettings(input=[str(help_text(tmp_path))], output=str(tmp_path / "out"), workers=1, piece_mb=0.1)
    done = []
    real = prepare_pieces.prepare_piece

    def stopped_after_two(job):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(real(job))
        return done[-1]

    monkeypatch.setattr("framework.data.prepare.prepare_piece", stopped_after_two)
    with pytest.raises(Stopped, match="interrupted"):
        prepare(settings)
    assert not (tmp_path / "out" / "index.json").exists()
    kept = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "shards").iterdir()}
    monkeypatch.setattr("framework.data.prepare.prepare_piece", real)
    resumed = prepare(settings)
    assert "2 of 5 pieces prepared before, kept" in capsys.readouterr().out
    assert all(p.stat().st_mtime_ns == t for p, t in kept.items())
    fresh = prepare(PrepareSettings(**{**settings.__dict__, "output": str(tmp_path / "fresh")}))
    assert resumed["splits"] == fresh["splits"] and files_of(tmp_path / "out") == files_of(tmp_path / "fresh")


def test_new_inputs_append_and_a_changed_input_or_tokenizer_is_refused(tmp_path):
    first, second = help_text(tmp_path, "a.txt", slice(0, 40)), help_text(tmp_path, "b.txt", slice(40, None))
    out = tmp_path / "out"
    before = prepare(PrepareSettings(input=[str(first)], output=str(out), workers=1))
    shards = files_of(out)
    after = prepare(PrepareSettings(input=[str(tmp_path / "*.txt")], output=str(out), workers=1))
    assert [i["path"] for i in after["inputs"]] == [str(first), str(second)]
    assert after["splits"]["train"][: len(before["splits"]["train"])] == before["splits"]["train"]
    assert all(files_of(out)[name] == data for name, data in shards.items())
    both = prepare(PrepareSettings(input=[str(first), str(second)], output=str(tmp_path / "both"), workers=1))
    assert both["splits"] == after["splits"]
    first.write_text(first.read_text() + "\n\nmore")
    with pytest.raises(ValueError, match=r"input: '.*a.txt' changed since .* was prepared from it"):
        prepare(PrepareSettings(input=[str(first)], output=str(out), workers=1))
    tokenizer = bpe_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="tokenizer: .* was prepared with 'bytes'"):
        prepare(PrepareSettings(input=[str(second)], output=str(out), tokenizer=str(tokenizer), workers=1))
    with pytest.raises(ValueError, match="val_fraction: 0.3, but .* was prepared with 0.01"):
        prepare(PrepareSettings(input=[str(second)], output=str(out), val_fraction=0.3, workers=1))
    # the inputs prepared before need not be there to append another
    second.unlink()
    third = help_text(tmp_path, "c.txt", slice(0, 5))
    appended = prepare(PrepareSettings(input=[str(third)], output=str(out), workers=1))
    assert [i["path"] for i in appended["inputs"]] == [str(first), str(second), str(third)]
    assert appended["splits"]["train"][: len(after["splits"]["train"])] == after["splits"]["train"]


def test_jsonl_and_parquet_through_pyarrow_with_a_tokenizer(tmp_path):
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    texts = help_text(tmp_path).read_text().split("\n\n")[:200]
    with open(tmp_path / "docs.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts[:100]))
    pq.write_table(pa.table({"text": texts[100:], "n": list(range(100))}), tmp_path / "docs.parquet", row_group_size=30)
    tokenizer = bpe_tokenizer(tmp_path)
    index = prepare(
        PrepareSettings(
            input=[str(tmp_path / "docs.jsonl"), str(tmp_path / "docs.parquet")],
            output=str(tmp_path / "out"),
            tokenizer=str(tokenizer),
            workers=2,
            val_fraction=0,
            test_fraction=0,
        )
    )
    eos = Tokenizer.from_file(str(tokenizer)).token_to_id("<|endoftext|>")
    expected = [i for t in texts if t for i in [*Tokenizer.from_file(str(tokenizer)).encode(t).ids, eos]]
    assert index["documents"] == 200 and index["eos_id"] == eos and index["vocab_size"] == 384
    assert stream(tmp_path / "out").tolist() == expected
    assert len(index["splits"]["train"]) == 1 + 4  # the jsonl in one piece, the parquet's 4 row groups
    for given, named in (
        ("docs.jsonl", "no row of '.*docs.jsonl' .* has a 'body' field"),
        ("docs.parquet", "'.*docs.parquet' has no column 'body' \\(its columns: text, n\\)"),
    ):
        with pytest.raises(ValueError, match=f"text_key: {named}"):
            prepare(
                PrepareSettings(
                    input=[str(tmp_path / given)], output=str(tmp_path / "body"), text_key="body", workers=1
                )
            )


def test_a_vocabulary_beyond_uint16_is_stored_as_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(70_000)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "wide.json"))
    (tmp_path / "t.txt").write_text("w1 w69999 w65536\n\nw3")
    index = prepare(
        PrepareSettings(
            input=[str(tmp_path / "t.txt")],
            output=str(tmp_path / "out"),
            workers=1,
            tokenizer=str(tmp_path / "wide.json"),
            val_fraction=0,
            test_fraction=0,
        )
    )
    assert index["dtype"] == "uint32" and stream(tmp_path / "out").tolist() == [1, 69999, 65536, 3]


def test_the_command_line_names_a_bad_key_and_its_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match="bogus=1: expected key=value with a key among input, output, tokenizer"):
        parse(["input=x", "output=y", "bogus=1"])
    with pytest.raises(ConfigError, match="output: missing"):
        parse(["input=x"])
    with pytest.raises(ConfigError, match="val_fraction: must be in"):
        parse(["input=x", "output=y", "val_fraction=2"])
    with pytest.raises(ConfigError, match="workers: Value 'abc' of type 'str' could not be converted to Integer"):
        parse(["input=x", "output=y", "workers=abc"])
    with pytest.raises(ConfigError, match="where: 'lang' is not field=value"):  # (it said: text_key names no field)
        parse(["input=x", "output=y", "where=lang"])
    done = subprocess.run(
        [sys.executable, "-m", "framework.cli.prepare_data", f"input={tmp_path}/none/*.txt", f"output={tmp_path}/out"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "input: " in done.stderr and "names no .txt, .jsonl, .parquet file" in done.stderr


def workers_of(pid: int) -> list[int]:
    """The spawned worker processes whose parent is ``pid`` (from /proc; not the resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            spawned = b"spawn_main" in (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and spawned:
            found.append(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_killed_worker_or_a_sigterm_stops_the_run_and_the_next_run_resumes(tmp_path):
    text = tmp_path / "big.txt"
    text.write_text("\n\n".join([help_text(tmp_path).read_text()] * 12))
    out = tmp_path / "out"
    command = [
        sys.executable,
        "-m",
        "framework.cli.prepare_data",
        f"input={text}",
        f"output={out}",
        f"tokenizer={bpe_tokenizer(tmp_path)}",
        "workers=2",
        "piece_mb=0.25",
    ]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(workers_of(run.pid)) >= 2)  # (the pool's workers, before they have tokenized much)
    os.kill(workers_of(run.pid)[0], signal.SIGKILL)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1 and "stopped: a worker process died" in stderr
    assert "run the same command again to resume" in stdout and not (out / "index.json").exists()
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(list((out / "pieces").glob("0*.json"))) >= 4)
    workers = workers_of(run.pid)
    run.send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 130 and "stopped: interrupted" in stderr
    assert len(workers) == 2 and not [w for w in workers if alive(w)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    assert "pieces prepared before, kept" in done.stdout
    fresh = prepare(
        PrepareSettings(
            input=[str(text)],
            output=str(tmp_path / "fresh"),
            workers=2,
            piece_mb=0.25,
            tokenizer=str(tmp_path / "tokenizer.json"),
        )
    )
    assert read_index(out)["splits"] == fresh["splits"] and files_of(out) == files_of(tmp_path / "fresh")


def test_an_arrow_directory_and_compressed_jsonl_give_the_plain_jsonls_tokens_and_filters_apply(tmp_path):
    datasets = pytest.importorskip("datasets")
    texts = help_text(tmp_path).read_text().split("\n\n")[:120]
    rows = [{"text": t, "kind": "even" if i % 2 == 0 else "odd"} for i, t in enumerate(texts)]
    plain = tmp_path / "docs.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pa.output_stream(str(tmp_path / "docs.jsonl.gz"), compression="gzip") as out:
        out.write(plain.read_bytes())
    with pa.output_stream(str(tmp_path / "docs.jsonl.zst"), compression="zstd") as out:
        out.write(plain.read_bytes())
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "arrow"))

    def tokens(given, **keep) -> list[int]:
        out = tmp_path / f"out-{len(list(tmp_path.iterdir()))}"
        prepare(
            PrepareSettings(input=[str(given)], output=str(out), workers=1, val_fraction=0, test_fraction=0, **keep)
        )
        return stream(out).tolist()

    expected = tokens(plain)
    assert len(expected) > 1000
    for given in (tmp_path / "docs.jsonl.gz", tmp_path / "docs.jsonl.zst", tmp_path / "arrow"):
        assert tokens(given) == expected, given
    long_even = "".join(r["text"] for r in rows if r["kind"] == "even" and len(r["text"]) >= 200)
    assert tokens(tmp_path / "arrow", min_chars=200, where="kind=even") == list(long_even.encode())
    assert tokens(plain, min_chars=200, where="kind=even") == list(long_even.encode())
    with pytest.raises(ValueError, match="where: the rows have no field 'colour'"):
        tokens(plain, where="colour=red")


def test_two_preparations_into_one_output_at_once_the_second_is_refused(tmp_path):
    from framework.data.prepare import _locked

    (tmp_path / "out").mkdir()
    source = help_text(tmp_path)
    with _locked(tmp_path / "out"):  # another preparation at work
        with pytest.raises(ValueError, match="output: another framework-prepare-data is writing"):
            prepare(PrepareSettings(input=[str(source)], output=str(tmp_path / "out"), workers=1))
    prepare(PrepareSettings(input=[str(source)], output=str(tmp_path / "out"), workers=1))  # once it is done


def damaged_inputs(directory: Path) -> dict:
    """Each kind of input damaged as a download or a disk leaves it: name -> (path, what the error says)."""
    import gzip

    import pyarrow.parquet as pq

    lines = "".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(2000)).encode()
    packed = gzip.compress(lines)
    (directory / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    with pa.output_stream(str(directory / "good.jsonl.zst"), compression="zstd") as out:
        out.write(lines)
    good = (directory / "good.jsonl.zst").read_bytes()
    (directory / "bad.jsonl.zst").write_bytes(good[:100] + b"\0" * 50 + good[150:])
    table = pa.table({"text": [f"row {i} " * 30 for i in range(3000)]})
    pq.write_table(table, directory / "good.parquet", row_group_size=500)
    good = (directory / "good.parquet").read_bytes()
    (directory / "bad.parquet").write_bytes(good[: len(good) // 2] + good[-8:])
    (directory / "arrow").mkdir()
    with pa.OSFile(str(directory / "arrow" / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    arrow = directory / "arrow" / "data-00000-of-00001.arrow"
    arrow.write_bytes(arrow.read_bytes()[: arrow.stat().st_size // 2])
    (directory / "line.jsonl").write_bytes(lines.replace(b"document 1500 ", b'document "1500 ', 1))
    (directory / "latin.txt").write_bytes("one\n\ntwo\n".encode() + "caf\xe9\n".encode("latin-1"))
    return {
        "gz": (directory / "cut.jsonl.gz", "is cut short or damaged: gzip fails after its first"),
        "zst": (directory / "bad.jsonl.zst", "is cut short or damaged: zstd fails before its first line (ZSTD"),
        "parquet": (directory / "bad.parquet", "does not read as Parquet, damaged or cut short? ("),
        "arrow": (arrow, "does not read as Arrow before its first row, damaged or cut short? ("),
        "line": (directory / "line.jsonl", "line 1501: not JSON (Expecting ',' delimiter at column 21); each line"),
        "txt": (directory / "latin.txt", "line 4: not UTF-8 text (invalid continuation byte)"),
    }


@pytest.mark.parametrize("damage", ["gz", "zst", "parquet", "arrow", "line", "txt"])
def test_a_damaged_input_is_named_by_its_file_and_line_not_an_os_error(tmp_path, damage):
    """An OSError from pyarrow ("Truncated compressed stream") had named no file."""
    path, message = damaged_inputs(tmp_path)[damage]
    with pytest.raises(ValueError) as err:
        prepare(PrepareSettings(input=[str(path)], output=str(tmp_path / "out"), workers=1))
    assert str(err.value).startswith(f"input: '{path}' {message}"), str(err.value)


def test_a_truncated_gzip_on_the_command_line_exits_2_and_keeps_the_corpus_prepared_before(tmp_path):
    damaged = damaged_inputs(tmp_path)
    source, out = help_text(tmp_path), tmp_path / "out"
    prepare(PrepareSettings(input=[str(source)], output=str(out), workers=1))
    before = {**files_of(out), "index.json": (out / "index.json").read_bytes()}
    command = [sys.executable, "-m", "framework.cli.prepare_data", f"output={out}", "workers=2"]
    done = subprocess.run([*command, f"input=[{source},{damaged['gz'][0]}]"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith(f"framework-prepare-data: input: '{damaged['gz'][0]}' is cut short or damaged: gzip fails")
    assert "run the same command again" not in done.stdout and "once the input named below is replaced" in done.stdout
    assert {**files_of(out), "index.json": (out / "index.json").read_bytes()} == before  # (it resumes from here)
    again = subprocess.run([*command, f"input=[{source}]"], capture_output=True, text=True)
    assert again.returncode == 0 and "up to date" in again.stdout
