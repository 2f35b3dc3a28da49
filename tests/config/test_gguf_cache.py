"""A GGUF file's cache entry is verified against the record written with it: a file edited, flipped, removed
or added is found, a damaged entry is converted again with a warning naming it, and where the cache cannot
be written the run is refused naming the entry and how to remove it; an intact entry's weights are not read
again while their file stays as verified. (The conversion itself is transformers': faked here with a tiny
directory, so the cache's logic runs in a second; tests/hf/test_gguf.py runs the real one.)"""

from __future__ import annotations

import errno
import json
import logging

import pytest
import torch
from safetensors.torch import save_file

from framework.config import cache_entry, gguf_files
from framework.config.gguf_files import RECORD, GGUFError, converted


def _write_directory(path, directory):
    """What a conversion writes, tiny: a config, a tokenizer's file and the weights."""
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "rms_norm_eps": 1e-05}))
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    save_file({"embed.weight": torch.arange(4096, dtype=torch.float32)}, str(directory / "model.safetensors"))


@pytest.fixture
def gguf(tmp_path, monkeypatch):
    """A GGUF file whose conversion is the tiny directory above, in a cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(gguf_files, "_write_directory", _write_directory)
    monkeypatch.setattr(gguf_files, "header_architecture", lambda path: "llama")
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF and its tensors")
    return path


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 1]))


DAMAGE = {
    "an edit of config.json": (
        lambda e: (e / "config.json").write_text((e / "config.json").read_text().replace("1e-05", "0.500")),
        "config.json has changed since it was written: its SHA-256 differs",
    ),
    "a flipped byte of the weights": (
        lambda e: _flip(e / "model.safetensors", (e / "model.safetensors").stat().st_size - 5),
        "model.safetensors has changed since it was written: its SHA-256 differs",
    ),
    "a flipped byte of the weights' header": (
        lambda e: _flip(e / "model.safetensors", 20),
        "model.safetensors has another header than the one written",
    ),
    "the weights removed": (lambda e: (e / "model.safetensors").unlink(), "it lacks model.safetensors"),
    "a file added": (
        lambda e: (e / "chat_template.jinja").write_text("{{ messages }}"),
        "it holds chat_template.jinja, which its conversion did not write",
    ),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_entry_is_converted_again_naming_it_or_refused_where_the_cache_is_read_only(
    gguf, damage, monkeypatch, caplog
):
    entry = converted(gguf)
    written = {p.name: p.read_bytes() for p in entry.iterdir() if p.name != cache_entry.STAMP}
    assert set(json.loads((entry / RECORD).read_text())["files"]) == {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
    }
    change, why = DAMAGE[damage]
    change(entry)
    with monkeypatch.context() as read_only:
        read_only.setattr(gguf_files, "_locked", lambda lock: _raise(OSError(errno.EROFS, "Read-only file system")))
        with pytest.raises(GGUFError) as err:
            converted(gguf)
    assert str(err.value).startswith(f"'{gguf}': its cache entry {entry} is damaged: {why}"), str(err.value)
    assert f"(Read-only file system): remove the entry (rm -r '{entry}')" in str(err.value)
    with caplog.at_level(logging.WARNING, logger=gguf_files.__name__):
        assert converted(gguf) == entry
    [warning] = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert (
        warning.startswith(f"The GGUF cache entry {entry} (of {gguf}) is damaged: {why}")
        and "converting it again" in warning
    )
    assert {p.name: p.read_bytes() for p in entry.iterdir() if p.name != cache_entry.STAMP} == written


def _raise(err):
    raise err


def test_an_intact_entry_is_used_without_reading_its_weights_again(gguf, monkeypatch):
    entry = converted(gguf)
    read = []
    hashed = cache_entry.file_sha256
    monkeypatch.setattr(cache_entry, "file_sha256", lambda path: read.append(path.name) or hashed(path))
    monkeypatch.setattr(cache_entry, "_verified", {})  # (as a new process finds it)
    assert converted(gguf) == entry and sorted(read) == ["config.json", "tokenizer.json"]
    read.clear()
    assert converted(gguf) == entry and read == []  # (this process verified it already)
    monkeypatch.setattr(cache_entry, "_verified", {})
    (entry / cache_entry.STAMP).unlink()  # (no stamp: a cache that could not be written one)
    assert converted(gguf) == entry and "model.safetensors" in read
