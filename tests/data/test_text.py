"""datamodule=text: windows of a corpus that ships with Python, split by a fixed seed; a folder of
.txt files or a tokenizers file of the user's own."""

from __future__ import annotations

import json

import pytest
import torch

from framework.data.text import TextDataModule, builtin_corpus, unigram_entropy


def test_the_builtin_corpus_makes_shifted_windows_split_the_same_way_every_time():
    first, second = TextDataModule(seq_len=64), TextDataModule(seq_len=64)
    first.setup("fit"), second.setup("fit")
    x, y = first.train_set[0]
    assert x.shape == y.shape == (64,) and torch.equal(x[1:], y[:-1])  # the targets are the next bytes
    total = len(first.train_set) + len(first.val_set) + len(first.test_set)
    assert total == (len(builtin_corpus().encode()) - 1) // 64
    assert torch.equal(first.val_set.tensors[0], second.val_set.tensors[0])
    assert 3.0 < unigram_entropy(builtin_corpus().encode()) < 3.5  # nats per byte (README: 3.26)


def _texts_and_word_tokenizer(tmp_path):
    """Three .txt files of 8 words, and a word-level tokenizers file of them (9 tokens with [UNK])."""
    import tokenizers

    (tmp_path / "texts").mkdir()
    for i in range(3):
        (tmp_path / "texts" / f"{i}.txt").write_text("the quick brown fox jumps over the lazy dog " * 50)
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.train(
        [str(p) for p in (tmp_path / "texts").glob("*.txt")],
        tokenizers.trainers.WordLevelTrainer(special_tokens=["[UNK]"]),
    )
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return tokenizer


def test_a_folder_of_texts_and_a_tokenizer_file(tmp_path):
    tokenizer = _texts_and_word_tokenizer(tmp_path)
    dm = TextDataModule(
        seq_len=8,
        data_dir=str(tmp_path / "texts"),
        tokenizer=str(tmp_path / "tokenizer.json"),
        vocab_size=tokenizer.get_vocab_size(),
    )
    dm.setup("fit")
    assert dm.vocab_size == 9 and int(dm.train_set.tensors[0].max()) < 9  # 8 words and [UNK]
    assert dm.codec.decode(dm.codec.encode("the lazy dog")) == "the lazy dog"
    with pytest.raises(ValueError, match="datamodule.vocab_size: 256, but the tokens number 9"):
        TextDataModule(tokenizer=str(tmp_path / "tokenizer.json"), vocab_size=256)


def test_the_tokenizers_vocabulary_against_the_data_and_the_model_is_checked_before_start(tmp_path):
    from framework import compose
    from framework.config import ConfigError
    from framework.job.preflight import preflight

    _texts_and_word_tokenizer(tmp_path)
    (tmp_path / "broken.json").write_text("{not json")
    base = ["experiment=gpt_text", "model=gpt/tiny", f"datamodule.data_dir={tmp_path / 'texts'}"]
    cases = [
        (
            [f"datamodule.tokenizer={tmp_path / 'tokenizer.json'}"],  # vocab_size forgotten: 256
            "datamodule.vocab_size: 256, but the tokens number 9 (the tokenizer",
        ),
        (
            [f"datamodule.tokenizer={tmp_path / 'tokenizer.json'}", "datamodule.vocab_size=9", "model.vocab_size=5"],
            "model.vocab_size: 5, but the data's token ids run to 8",
        ),
        ([f"datamodule.tokenizer={tmp_path / 'broken.json'}"], "datamodule.tokenizer: '"),
        (["datamodule.vocab_size=300"], "datamodule.vocab_size: 300, but the tokens number 256 (UTF-8 bytes)"),
    ]
    for overrides, message in cases:
        with pytest.raises(ConfigError) as err:
            preflight(compose([*base, *overrides]))
        assert any(message in problem for problem in err.value.problems), err.value.problems
    preflight(compose([*base, f"datamodule.tokenizer={tmp_path / 'tokenizer.json'}", "datamodule.vocab_size=9"]))


@pytest.mark.parametrize("ranks", [[], ["strategy=ddp", "trainer.devices=2"]])
def test_a_validation_interval_beyond_the_epoch_is_refused_before_the_first_step(tmp_path, ranks):
    # the epoch's length is the encoded corpus's: known where the ranks read it, not before start (no
    # check reads a whole corpus); refused there with the same kind of message, before any step
    from framework import compose, fit
    from framework.config import ConfigError

    dm = TextDataModule(seq_len=64, batch_size=32)
    dm.setup("fit")
    epoch = len(dm.train_set) // 32  # the trainer's batches per epoch, from the corpus as setup reads it
    run = ["experiment=gpt_text", "datamodule.seq_len=64", "datamodule.batch_size=32", "trainer.max_steps=1"]
    run += ["task.max_new_tokens=16"]  # (room to generate in 64 positions: its prediction is refused otherwise)
    with pytest.raises(ConfigError) as err:
        fit(compose([*run, *ranks, f"trainer.val_check_interval={epoch + 1}"]), output_dir=str(tmp_path))
    assert any(
        p.startswith(f"trainer.val_check_interval: every {epoch + 1} training batches, but an epoch has {epoch} (")
        for p in err.value.problems
    ), err.value.problems
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "failed" and results["problems"] == err.value.problems
    assert not (tmp_path / "checkpoints").exists() and "traceback" not in (tmp_path / "train.log").read_text().lower()
