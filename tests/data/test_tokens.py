"""datamodule=tokens: windows read from the shards equal the prepared stream (across shard ends too), the
positions restart where documents start, and a corpus that is missing, damaged or of another
tokenizer is refused before start, naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from framework import compose, fit
from framework.config import ConfigError
from framework.data.token_shards import offsets_file, read_index
from framework.data.tokens import TokensDataModule
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.corpora import bpe_tokenizer, prepared_help, stream

TOKENS = [
    *(o for o in GPT_TINY if not o.startswith("datamodule=")),
    "datamodule=tokens",
    "datamodule.seq_len=32",
    "datamodule.batch_size=8",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return prepared_help(tmp_path_factory.mktemp("tokens"), piece_mb=0.05)


def test_windows_are_the_stream_across_shard_ends_and_positions_restart_at_documents(corpus):
    index = read_index(corpus)
    shards = index["splits"]["train"]
    tokens = stream(corpus).astype(np.int64)
    starts = np.concatenate(
        [
            np.load(offsets_file(corpus / s["file"])) + base
            for s, base in zip(shards, np.cumsum([0] + [s["tokens"] for s in shards]))
        ]
    )
    data = TokensDataModule(str(corpus), batch_size=4, seq_len=50, document_boundaries=True)
    data.setup("fit")
    windows = data.train_set
    assert len(windows) == (len(tokens) - 1) // 50
    first_end = shards[0]["tokens"]
    crossing = first_end // 50  # the window over the first shard's end
    for i in (0, crossing, len(windows) - 1):
        inputs, targets, positions = windows[i]
        assert inputs.tolist() == tokens[i * 50 : i * 50 + 50].tolist()
        assert targets.tolist() == tokens[i * 50 + 1 : i * 50 + 51].tolist()
        expected = [t - max([i * 50] + [s for s in starts if s <= t]) for t in range(i * 50, i * 50 + 50)]
        assert positions.tolist() == expected
    batch = windows.__getitems__([crossing, 0])
    assert torch.equal(batch.tensors[0][0], windows[crossing][0]) and batch.tensors[2].shape == (2, 50)


def problems(*overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as err:
        preflight(compose([*TOKENS, *overrides]))
    return err.value.problems


def test_a_missing_a_truncated_shard_and_a_missing_index_are_named(corpus, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(corpus, broken)
    index = read_index(broken)
    first, second = (broken / s["file"] for s in index["splits"]["train"][:2])
    first.unlink()
    second.write_bytes(second.read_bytes()[:-10])
    offsets = Path(offsets_file(broken / index["splits"]["train"][2]["file"]))
    offsets.write_bytes(offsets.read_bytes()[:-8])
    found = problems(f"datamodule.path={broken}")
    assert any(
        p.startswith(f"datamodule.path: document offsets '{offsets}' are not a whole saved array") for p in found
    )
    assert any(p.startswith(f"datamodule.path: missing shard '{first}'") for p in found)
    assert any(p.startswith(f"datamodule.path: shard '{second}' has") and "it is truncated" in p for p in found)
    [missing] = problems(f"datamodule.path={tmp_path / 'nothing'}")
    assert missing.startswith(f"datamodule.path: no prepared corpus at '{tmp_path / 'nothing'}' (index.json missing)")


def test_another_tokenizer_and_a_vocabulary_beyond_the_embedding_are_refused(corpus, tmp_path):
    tokenizer = bpe_tokenizer(tmp_path)
    [other] = problems(f"datamodule.path={corpus}", f"datamodule.tokenizer={tokenizer}")
    assert other.startswith(
        f"datamodule.tokenizer: '{tokenizer}' is not the tokenizer the corpus was prepared with (UTF-8 bytes"
    )
    [small] = problems(f"datamodule.path={corpus}", "model.vocab_size=200")
    [interval] = problems(f"datamodule.path={corpus}", "trainer.val_check_interval=5000")
    assert interval.startswith("trainer.val_check_interval: every 5000 training batches, but an epoch has")
    assert small.startswith("model.vocab_size: 200, but the data's token ids run to 255")
    [pipeline] = problems(
        f"datamodule.path={corpus}", "datamodule.document_boundaries=true", "strategy=pp", "trainer.devices=2"
    )
    assert pipeline.startswith("datamodule.document_boundaries: a pipeline's stages pass hidden states on")
    found = problems(
        f"datamodule.path={corpus}",
        "datamodule.document_boundaries=true",
        "model=mlp",
        "model.input_shape=[32]",
        "model.num_classes=256",
    )
    assert any("MLP.forward takes no 'positions'" in p for p in found)


@pytest.mark.parametrize(
    "weights, shown",
    [
        (
            "[inf,1]",
            "[inf, 1]; one positive number per corpus of datamodule.path (2), each finite and > 0 (inf is not)",
        ),
        (
            "[nan,1]",
            "[nan, 1]; one positive number per corpus of datamodule.path (2), each finite and > 0 (nan is not)",
        ),
        (
            "[0,-1]",
            "[0, -1]; one positive number per corpus of datamodule.path (2), each finite and > 0 (0, -1 are not)",
        ),
        ("[1]", "[1]; one positive number per corpus of datamodule.path (2), each finite and > 0"),
    ],
)
def test_a_mixtures_weights_are_finite_and_positive_one_per_corpus(corpus, weights, shown, tmp_path):
    """An infinite weight made every quota NaN ("cannot convert float NaN to integer" in the rank)."""
    other = shutil.copytree(corpus, tmp_path / "copy")  # (one corpus named twice is refused: below)
    found = problems(f"datamodule.path=[{corpus},{other}]", f"datamodule.weights={weights}")
    assert found == [f"datamodule.weights: {shown}, e.g. [0.5, 0.5] (null: by their sizes)"]


def test_one_corpus_named_twice_in_a_mixture_is_refused(corpus):
    """It had been mixed with itself in silence: each of its windows twice an epoch."""
    assert problems(f"datamodule.path=[{corpus},{corpus}/.]") == [
        f"datamodule.path: {corpus}/. named more than once; mix each corpus once (datamodule.weights gives one a "
        "larger share)"
    ]


@pytest.mark.multiprocess
def test_vocab_size_comes_from_the_corpus_and_packed_documents_train_under_tp_as_on_one_device(corpus, tmp_path):
    run = [*TOKENS, f"datamodule.path={corpus}", "trainer.max_steps=4", "datamodule.document_boundaries=true"]
    cfg = compose(run)
    assert cfg.datamodule.vocab_size == 256 and cfg.model.vocab_size == 256
    results = fit(cfg, output_dir=str(tmp_path / "one"))
    assert results["status"] == "completed" and results["steps"] == 4
    # the mask and the positions' rotary tables pass the tensor-parallel plan's sequence-parallel inputs
    fit(compose([*run, "strategy=tp", "trainer.devices=2"]), output_dir=str(tmp_path / "tp"))
    expected = train_losses(tmp_path / "one")
    assert len(expected) == 4 and train_losses(tmp_path / "tp") == pytest.approx(expected, rel=1e-6)
