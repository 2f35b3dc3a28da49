"""``framework-prepare-data``: a corpus tokenized once, into token shards and an index that
``datamodule=tokens`` reads (token_shards.py describes the files).

The inputs are cut into pieces (token_sources.py) that worker processes tokenize and write
independently, each piece's marker last. So a run that is stopped resumes where it was (the pieces
with a marker are kept), a run over the same inputs changes nothing, and a run with new inputs
appends their pieces to the corpus; an input changed since it was prepared, another tokenizer or
other settings are refused, naming what differs. The index is written last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import multiprocessing
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from framework.config.optional_modules import is_missing, not_installed
from framework.data.prepare_pieces import init_worker, prepare_piece
from framework.data.token_shards import (
    FORMAT,
    INDEX,
    SPLITS,
    read_index,
    token_dtype,
    tokenizer_fingerprint,
    write_index,
)
from framework.data.token_sources import PYARROW_KINDS, input_files, kind, plan_pieces

# Tried in order when eos_token is "auto": the end-of-text tokens of GPT-2, Llama and Mistral, Qwen.
_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|im_end|>", "<eos>")


def _key(default, what: str):
    return (
        field(default_factory=default, metadata={"help": what})
        if callable(default)
        else field(default=default, metadata={"help": what})
    )


@dataclass
class PrepareSettings:
    """``framework-prepare-data``'s keys (their help: ``--help``)."""

    input: list = _key(list, "files, folders or globs of .txt, .jsonl, .parquet")
    output: str = _key("", "the prepared corpus's directory (datamodule.path)")
    tokenizer: Optional[str] = _key(None, "a tokenizers JSON file or a model directory; null: UTF-8 bytes")
    workers: int = _key(0, "tokenizing processes; 0: one per CPU core")
    val_fraction: float = _key(0.01, "the share of documents for validation, drawn by split_seed")
    test_fraction: float = _key(0.01, "the share of documents for testing")
    split_seed: int = _key(0, "the seed of the split by document")
    document_separator: str = _key("\n\n", "what separates a .txt file's documents")
    text_key: str = _key("text", "the text field of a .jsonl line or a .parquet or .arrow row")
    min_chars: int = _key(0, "documents shorter than this many characters are left out")
    where: Optional[str] = _key(None, "field=value: only the .jsonl, .parquet or .arrow rows whose field has it")
    eos_token: Optional[str] = _key("auto", "appended to every document; auto: the tokenizer's own, if it has one")
    piece_mb: float = _key(16.0, "MB of input per piece of work (the unit a stopped run resumes from)")


# The settings an output keeps: preparing into it again with another value is refused.
KEPT = (
    "val_fraction",
    "test_fraction",
    "split_seed",
    "document_separator",
    "text_key",
    "eos_token",
    "min_chars",
    "where",
)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PrepareSettings) if f.default is not dataclasses.MISSING}


def _tokenizer_facts(settings: PrepareSettings) -> dict:
    if not settings.tokenizer:
        return {"file": None, "fingerprint": "bytes", "vocab_size": 256, "eos_id": None}
    from framework.data.tokenizer_files import TokenizerFile, load_tokenizer, tokenizer_file

    problems = TokenizerFile(settings.tokenizer).problems()
    if problems:
        raise ValueError(problems[0])
    path = tokenizer_file(settings.tokenizer)
    try:
        tokenizer = load_tokenizer(str(path))
    except Exception as err:  # noqa: BLE001 - the tokenizers library raises its own exception types
        raise ValueError(f"tokenizer: '{path}' is not a tokenizers JSON file ({str(err).splitlines()[0]})") from err
    eos = settings.eos_token
    if eos == "auto":
        eos = next((t for t in _EOS_CANDIDATES if tokenizer.token_to_id(t) is not None), None)
    if eos is not None and tokenizer.token_to_id(eos) is None:
        raise ValueError(
            f"eos_token: '{eos}' is not a token of {path} (auto: one of {', '.join(_EOS_CANDIDATES)} "
            "when the tokenizer has it; null: none)"
        )
    return {
        "file": str(path),
        "fingerprint": tokenizer_fingerprint(path),
        "vocab_size": tokenizer.get_vocab_size(),
        "eos_id": tokenizer.token_to_id(eos) if eos is not None else None,
    }


def _record(path: Path) -> dict:
    stat = path.stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _reconcile(
    output: Path, files: list[Path], settings: PrepareSettings, tokenizer: dict, before: Optional[dict]
) -> list[dict]:
    """The inputs in their order in the output (those ``before``, its index, holds first); ValueError
    naming what differs from what the output was prepared with."""
    kept_path = output / "pieces" / "settings.json"
    kept = json.loads(kept_path.read_text()) if kept_path.is_file() else None
    ours = {**{k: getattr(settings, k) for k in KEPT}, "tokenizer": tokenizer["fingerprint"]}
    if kept is not None:
        for key, value in ours.items():
            if kept.get(key, _DEFAULTS.get(key)) != value:  # (a key newer than the output: its default)
                raise ValueError(
                    f"{key}: {value!r}, but {output} was prepared with {kept.get(key)!r}; prepare into a "
                    "new output (or remove this one)"
                )
    known = {r["path"]: r for r in (before["inputs"] if before else [])}
    for path in files:
        old, now = known.get(str(path)), _record(path)
        if old is not None and (old["size"], old["mtime_ns"]) != (now["size"], now["mtime_ns"]):
            raise ValueError(
                f"input: '{path}' changed since {output} was prepared from it (size {old['size']} -> "
                f"{now['size']}); prepare into a new output"
            )
    (output / "pieces").mkdir(parents=True, exist_ok=True)
    if kept is None:
        kept_path.write_text(json.dumps(ours))
    return list(known.values()) + [_record(p) for p in files if str(p) not in known]


def _done(output: Path, piece, source: dict) -> Optional[dict]:
    """The piece's marker, when it was written for this very piece of this very input."""
    path = output / "pieces" / f"{piece.name}.json"
    if not path.is_file():
        return None
    marker = json.loads(path.read_text())
    same = marker.get("source") == source and (marker.get("start"), marker.get("end")) == (piece.start, piece.end)
    return marker if same else None


class Stopped(Exception):
    """Preparation stopped before every piece was done (a signal, or a worker that died); the pieces
    done are kept, and the same command resumes. ``exit_code``: 130 for a signal, else 1."""

    def __init__(self, why: str, exit_code: int = 1):
        super().__init__(why)
        self.exit_code = exit_code


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt


def _in_workers(jobs: list, workers: int) -> Iterator[dict]:
    """The jobs' markers as ``workers`` spawned processes finish them; a worker that dies (killed,
    out of memory) stops the run instead of leaving it waiting for a piece that never comes."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), init_worker)
    try:
        pending = {pool.submit(prepare_piece, job) for job in jobs}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    except BrokenProcessPool as err:
        raise Stopped("a worker process died (killed, or out of memory?)") from err
    finally:
        for process in list(getattr(pool, "_processes", {}).values()):  # (no public way before Python 3.14)
            process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


def _run(jobs: list, workers: int, total_bytes: int) -> list[dict]:
    """Every job through ``prepare_piece``: in this process, or over ``workers`` processes. SIGINT
    and SIGTERM stop it, keeping the pieces done."""
    from tqdm import tqdm

    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="tokenizing", disable=not jobs)
    done, before = [], signal.signal(signal.SIGTERM, _stop_on_sigterm)
    resume = "run the same command again to resume"
    try:
        markers = (prepare_piece(job) for job in jobs) if workers <= 1 or len(jobs) <= 1 else _in_workers(jobs, workers)
        for marker in markers:
            done.append(marker)
            bar.update(marker["bytes"])
        return done
    except KeyboardInterrupt as err:
        raise Stopped("interrupted", 130) from err
    except ValueError:  # (an input that does not read: the same command would stop on it again)
        resume = "the same command resumes from them once the input named below is replaced or left out"
        raise
    finally:
        signal.signal(signal.SIGTERM, before)
        bar.close()
        if len(done) < len(jobs):
            print(f"{len(done)} of {len(jobs)} pieces done this time, kept; {resume}")


def _index(
    settings: PrepareSettings, tokenizer: dict, inputs: list[dict], before: Optional[dict], markers: list[dict]
) -> dict:
    """The index of the corpus: what ``before`` (the index of the inputs prepared earlier) held, then
    the new pieces' shards in order."""
    old = before["splits"] if before else {}
    splits = {
        split: old.get(split, []) + [m["splits"][split] for m in markers if split in m["splits"]] for split in SPLITS
    }
    return {
        "format": FORMAT,
        "dtype": token_dtype(tokenizer["vocab_size"]),
        "tokenizer": {
            "fingerprint": tokenizer["fingerprint"],
            "file": tokenizer["file"],
            "vocab_size": tokenizer["vocab_size"],
        },
        "vocab_size": tokenizer["vocab_size"],
        "eos_id": tokenizer["eos_id"],
        "settings": {k: getattr(settings, k) for k in KEPT},
        "inputs": inputs,
        "documents": (before["documents"] if before else 0) + sum(m["documents"] for m in markers),
        "tokens": {split: sum(s["tokens"] for s in shards) for split, shards in splits.items()},
        "splits": splits,
    }


def prepare(settings: PrepareSettings) -> dict:
    """Prepare (or resume, or append to) ``settings.output``; its index. One preparation at a time
    writes an output (a lock on ``<output>/.lock``; another is refused, naming the one at work)."""
    output = Path(settings.output)
    files = input_files([str(i) for i in settings.input])
    rows = sorted({kind(f) for f in files if kind(f) in PYARROW_KINDS})
    if rows and is_missing("pyarrow"):  # (before a piece starts: each would stop on it)
        raise ValueError(not_installed("input", "pyarrow", f"reading {', '.join(rows)} files"))
    tokenizer = _tokenizer_facts(settings)
    output.mkdir(parents=True, exist_ok=True)
    with _locked(output):
        return _prepare(settings, output, files, tokenizer)


@contextlib.contextmanager
def _locked(output: Path):
    """An exclusive lock on ``output`` for this process (released when it ends, however it ends)."""
    import fcntl

    with open(output / ".lock", "a") as lock:  # (created once, never written: a run that is a no-op changes no file)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(
                f"output: another framework-prepare-data is writing {output}; wait for it to end, or prepare into "
                "another output"
            ) from None
        yield


def _prepare(settings: PrepareSettings, output: Path, files: list[Path], tokenizer: dict) -> dict:
    before = read_index(output) if (output / INDEX).is_file() else None
    inputs = _reconcile(output, files, settings, tokenizer, before)
    if before is not None and before["inputs"] == inputs:
        print(f"{output}: up to date ({len(inputs)} inputs prepared before); nothing to do")
        return before
    # (the inputs an index lists are whole: only the others are planned, so theirs need not exist here)
    known = len(before["inputs"]) if before else 0
    piece_bytes = max(1, int(settings.piece_mb * 1e6))
    pieces = [
        (p, source)
        for number, source in enumerate(inputs)
        if number >= known
        for p in plan_pieces(number, Path(source["path"]), piece_bytes, settings.document_separator)
    ]
    shared = {
        **{k: getattr(settings, k) for k in KEPT},
        "tokenizer_file": tokenizer["file"],
        "eos_id": tokenizer["eos_id"],
        "dtype": token_dtype(tokenizer["vocab_size"]),
    }
    markers = {p.name: _done(output, p, source) for p, source in pieces}
    jobs = [(p, str(output), shared, source) for p, source in pieces if markers[p.name] is None]
    if len(jobs) < len(pieces):
        print(f"{output}: {len(pieces) - len(jobs)} of {len(pieces)} pieces prepared before, kept")
    workers = settings.workers or len(os.sched_getaffinity(0))
    for marker in _run(jobs, min(workers, len(jobs)), sum(p.size for p, *_ in jobs)):
        markers[marker["piece"]] = marker
    index = _index(settings, tokenizer, inputs, before, [markers[p.name] for p, _ in pieces])
    if not index["tokens"]["train"]:
        raise ValueError(
            f"input: the inputs hold no text for training ({index['documents']} documents, "
            f"{sum(index['tokens'].values())} tokens): empty files, or text_key={settings.text_key!r} "
            "names no field of theirs"
        )
    write_index(output, index)
    return index
