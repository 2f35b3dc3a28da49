"""WeightReader: a saved model's tensors, whole or a rank's part of them, equal safetensors' own reads,
and reading them keeps none of the file in the process's resident memory (a memory map did: every page
it touched, while it was open)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from framework.models import hf_files

TENSORS = {
    "matrix": torch.randn(37, 21),
    "cube": torch.randn(5, 6, 7).to(torch.bfloat16),
    "ids": torch.arange(40, dtype=torch.int64).reshape(8, 5),
    "flags": torch.rand(13) > 0.5,
    "scalar": torch.tensor(2.5),
    "empty": torch.zeros(0, 4),
}
PARTS = [
    (),
    (slice(3, 11),),
    (slice(None), slice(2, 9)),
    (slice(4, 30), slice(5, 6)),
    (slice(2, 2),),
    (slice(1, 20, 3), slice(0, 7)),
]


@pytest.fixture
def saved(tmp_path) -> Path:
    save_file(TENSORS, str(tmp_path / "model.safetensors"))
    return tmp_path


@pytest.mark.parametrize("chunk", [hf_files.CHUNK_BYTES, 100])  # 100 bytes: a part cut along dim 1 read in pieces
def test_parts_equal_safetensors_reads(saved, chunk, monkeypatch):
    from safetensors import safe_open

    monkeypatch.setattr(hf_files, "CHUNK_BYTES", chunk)
    reader, expected = hf_files.WeightReader(saved), load_file(str(saved / "model.safetensors"))
    assert sorted(reader.names()) == sorted(TENSORS) and "matrix" in reader and "other" not in reader
    for name, tensor in expected.items():
        assert reader.shape(name) == list(tensor.shape)
        got = reader.get(name)
        assert got.dtype == tensor.dtype and torch.equal(got, tensor), name
    with safe_open(str(saved / "model.safetensors"), framework="pt") as handle:
        for name in ("matrix", "cube", "ids"):
            for index in PARTS:
                index = index[: len(TENSORS[name].shape)]
                part = reader.get_part(name, index)
                assert torch.equal(part, handle.get_slice(name)[index] if index else handle.get_tensor(name)), (
                    name,
                    index,
                )


def _resident_file_bytes() -> int:
    """This process's resident pages that are mapped files (/proc/self/status's RssFile)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no RssFile in /proc/self/status (not Linux)")


def test_reading_keeps_none_of_the_file_resident(tmp_path):
    """64 MiB read tensor by tensor, copied as a model's init copies them, with the reader still open:
    the file's pages are not the process's (through safe_open's map, all 64 MiB were)."""
    save_file({f"w{i}": torch.randn(1024, 1024) for i in range(16)}, str(tmp_path / "model.safetensors"))
    reader = hf_files.WeightReader(tmp_path)
    before = _resident_file_bytes()
    into = torch.empty(1024, 1024)
    for name in reader.names():
        into.copy_(reader.get_part(name, (slice(None), slice(None))))
    assert _resident_file_bytes() - before < 8 * 2**20
    assert torch.equal(into, load_file(str(tmp_path / "model.safetensors"))[name])


def test_a_file_cut_short_is_named(saved):
    path = saved / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-64])
    reader = hf_files.WeightReader(saved)  # (its header is whole: the check before start names the size)
    with pytest.raises(ValueError, match="is cut short"):
        for name in TENSORS:
            reader.get(name)
    path.write_bytes(b"\x10")
    with pytest.raises(ValueError, match="is not a safetensors file"):
        hf_files.WeightReader(saved)
