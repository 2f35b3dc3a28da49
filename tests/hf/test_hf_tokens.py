"""A pretrained Hugging Face model on a corpus prepared with its own tokenizer (its directory as
``tokenizer=``): it trains, packed documents kept apart; a corpus of another tokenizer is refused."""

from __future__ import annotations

import shutil

import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.corpora import bpe_tokenizer, prepared_help

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A tiny Llama saved with its tokenizer (a BPE of 384 tokens) in one directory, as a Hub model is."""
    directory = tmp_path_factory.mktemp("llama_with_tokenizer")
    shutil.copy(bpe_tokenizer(tmp_path_factory.mktemp("bpe")), directory / "tokenizer.json")
    config = transformers.LlamaConfig(
        vocab_size=384,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    return directory


def run(llama_dir, corpus, *more: str) -> list[str]:
    return [
        *(o for o in GPT_TINY if not o.startswith(("model=", "datamodule="))),
        "model=hf/causal_lm",
        f"model.path={llama_dir}",
        "datamodule=tokens",
        f"datamodule.path={corpus}",
        "datamodule.seq_len=32",
        "datamodule.batch_size=8",
        *more,
    ]


def test_the_pretrained_llama_trains_on_a_corpus_of_its_tokenizer_and_refuses_another(llama_dir, tmp_path):
    corpus = prepared_help(tmp_path / "ours", tokenizer=str(llama_dir))
    results = fit(
        compose(run(llama_dir, corpus, "trainer.max_steps=4", "datamodule.document_boundaries=true")),
        output_dir=str(tmp_path / "run"),
    )
    assert results["status"] == "completed" and len(train_losses(tmp_path / "run")) == 4
    bytes_corpus = prepared_help(tmp_path / "bytes")
    with pytest.raises(ConfigError) as err:
        preflight(compose(run(llama_dir, bytes_corpus)))
    assert any(
        p.startswith(f"datamodule.path: the corpus at {bytes_corpus} was prepared with UTF-8 bytes")
        and f"not model.path's tokenizer {llama_dir / 'tokenizer.json'}" in p
        for p in err.value.problems
    )
