"""A prepared corpus cannot change a run silently: its shards carry checksums (a damaged one fails
the read that would use it, naming the file), its index cannot point outside it, damaged document
offsets are refused before start, and a checkpoint records the corpus it trained on: a resume on
the corpus grown by appending continues its epoch exactly (the new windows join from the next), on
a corpus changed otherwise it is refused before start."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from framework import compose, fit
from framework.config import ConfigError
from framework.data.prepare import PrepareSettings, prepare
from framework.data.token_shards import offsets_file, read_index, write_index
from framework.job.preflight import preflight
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.corpora import help_text

RUN = [
    *(o for o in GPT_TINY if not o.startswith("datamodule=")),
    "datamodule=tokens",
    "datamodule.seq_len=32",
    "datamodule.batch_size=8",
    "trainer.limit_val_batches=1",
    "trainer.num_sanity_val_steps=0",
    "test=false",
]


def prepared(directory: Path, topics: slice) -> Path:
    output = directory / "corpus"
    source = help_text(directory, "a.txt", topics)
    prepare(PrepareSettings(input=[str(source)], output=str(output), workers=1, piece_mb=0.02))
    return output


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return prepared(tmp_path_factory.mktemp("corpus"), slice(0, 12))


def test_shards_carry_their_checksums_and_a_damaged_one_fails_naming_it(corpus, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    shard = damaged / read_index(damaged)["splits"]["train"][1]["file"]
    data = bytearray(shard.read_bytes())
    data[10] = (data[10] + 1) % 256  # a byte flip that stays a valid token id
    shard.write_bytes(bytes(data))
    preflight(compose([*RUN, f"datamodule.path={damaged}"]))  # (the tokens are read by the ranks, not here)
    with pytest.raises(ValueError) as err:
        fit(compose([*RUN, f"datamodule.path={damaged}", "trainer.max_steps=3"]), output_dir=str(tmp_path / "run"))
    assert str(err.value).startswith(f"datamodule.path: shard '{shard}' is damaged: its checksum is")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["status"] == "failed" and f"shard '{shard}' is damaged" in results["error"]
    assert all("crc32" in s and "max_id" in s for s in read_index(corpus)["splits"]["train"])


def test_an_index_outside_its_corpus_and_damaged_offsets_are_refused_before_start(corpus, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    index = read_index(damaged)
    index["splits"]["train"][0]["file"] = "../../../etc/passwd"
    write_index(damaged, index)
    offsets = Path(offsets_file(damaged / index["splits"]["train"][1]["file"]))
    values = np.load(offsets)
    values[[1, 2]] = values[[2, 1]]  # two offsets out of order, the file still a whole array
    np.save(offsets, values)
    with pytest.raises(ConfigError) as err:
        preflight(compose([*RUN, f"datamodule.path={damaged}"]))
    found = err.value.problems
    assert any("lists '../../../etc/passwd', outside the corpus's shards/ directory" in p for p in found), found
    assert any(f"document offsets '{offsets}' are damaged" in p for p in found), found


def _epoch_run(path, out, *more):
    """Two epochs, a checkpoint every 4 steps (mid-epoch: an epoch here is longer)."""
    run = [
        *RUN,
        f"datamodule.path={path}",
        "trainer.max_epochs=2",
        "callbacks=model_checkpoint",
        "callbacks.model_checkpoint.monitor=null",
        "callbacks.model_checkpoint.every_n_train_steps=4",
        "callbacks.model_checkpoint.save_top_k=-1",
        "callbacks.model_checkpoint.filename='step{step}'",
        *more,
    ]
    return fit(compose(run), output_dir=str(out))


def test_a_resume_on_the_corpus_grown_continues_its_epoch_exactly(tmp_path):
    old = prepared(tmp_path / "old", slice(0, 6))
    first = _epoch_run(old, tmp_path / "first")
    assert first["status"] == "completed"
    steps_per_epoch = first["steps"] // 2
    grown = tmp_path / "grown"
    shutil.copytree(old, grown)
    extra = help_text(tmp_path / "more", "b.txt", slice(6, 12))
    inputs = [str(tmp_path / "old" / "a.txt"), str(extra)]
    prepare(PrepareSettings(input=inputs, output=str(grown), workers=1, piece_mb=0.02))
    assert len(read_index(grown)["splits"]["train"]) > len(read_index(old)["splits"]["train"])
    checkpoint = tmp_path / "first" / "checkpoints" / "step4"
    resumed = _epoch_run(grown, tmp_path / "resumed", f"ckpt_path={checkpoint}")
    assert resumed["status"] == "completed"
    reference = train_losses(tmp_path / "first")
    losses = train_losses(tmp_path / "resumed")
    # the interrupted epoch: the uninterrupted run's losses on the old corpus
    assert losses[: steps_per_epoch - 4] == pytest.approx(reference[4:steps_per_epoch], rel=1e-6)
    # the next epoch reads the grown corpus: more steps than the old one's
    assert resumed["steps"] - steps_per_epoch > steps_per_epoch
    with pytest.raises(ConfigError) as err:  # a shard of the trained-on corpus changed: refused before start
        changed = tmp_path / "changed"
        shutil.copytree(old, changed)
        index = read_index(changed)
        index["splits"]["train"][0]["crc32"] += 1
        write_index(changed, index)
        preflight(compose([*RUN, f"datamodule.path={changed}", f"ckpt_path={checkpoint}"]))
    [problem] = [p for p in err.value.problems if "changed since the checkpoint" in p]
    assert problem.startswith(f"datamodule.path: the corpus at {changed} changed since the checkpoint {checkpoint}")
    assert "shard shards/" in problem and "checksum" in problem


@pytest.mark.multiprocess
def test_two_corpora_mixed_by_weight_resume_under_another_world_size_with_their_shares(tmp_path):
    first, second = prepared(tmp_path / "a", slice(0, 10)), prepared(tmp_path / "b", slice(10, 30))
    mix = [f"datamodule.path=[{first},{second}]", "datamodule.weights=[0.75,0.25]", "trainer.max_steps=12"]
    whole = _epoch_run(first, tmp_path / "whole", *mix)
    assert whole["status"] == "completed" and whole["steps"] == 12
    shares = whole["data"]["shares"]
    assert list(shares) == ["0_corpus", "1_corpus"]  # (both directories are called corpus)
    assert shares["0_corpus"] == pytest.approx(0.75, abs=0.02) and shares["1_corpus"] == pytest.approx(0.25, abs=0.02)
    assert whole["metrics"]["train/share/0_corpus"] == shares["0_corpus"]
    checkpoint = tmp_path / "whole" / "checkpoints" / "step4"
    two = _epoch_run(first, tmp_path / "two", *mix, f"ckpt_path={checkpoint}", "strategy=ddp", "trainer.devices=2")
    assert two["status"] == "completed" and two["world_size"] == 2
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "whole")[4:], rel=1e-6)
    with pytest.raises(ConfigError) as err:
        preflight(compose([*RUN, f"datamodule.path=[{first},{second}]", "datamodule.weights=[1]"]))
    assert any(
        p.startswith("datamodule.weights: [1]; one positive number per corpus of datamodule.path (2)")
        for p in err.value.problems
    )
