"""A prepared corpus under real ranks: a run killed mid-epoch resumes under another world size with
the uninterrupted run's losses, and a corpus of 2 GB of tokens trains on 2 ranks in well under its
size of memory, on exactly the windows the sampler chose."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys

import numpy as np
import pytest

from framework import compose, fit
from framework.data.sampler import ShardedSampler
from framework.data.token_shards import read_index, write_index, write_shard
from framework.data.tokens import TokensDataModule
from tests.helpers.configs import GPT_TINY, train_losses
from tests.helpers.corpora import bpe_tokenizer, help_text, prepared_help

pytestmark = pytest.mark.multiprocess

TOKENS = [
    *(o for o in GPT_TINY if not o.startswith("datamodule=")),
    "datamodule=tokens",
    "datamodule.seq_len=32",
    "datamodule.batch_size=8",
]
CKPT = [
    "callbacks=model_checkpoint",
    "callbacks.model_checkpoint.monitor=null",
    "callbacks.model_checkpoint.every_n_train_steps=3",
    "trainer.max_steps=12",
]


def test_killed_mid_epoch_on_two_ranks_resumed_on_one_gives_the_uninterrupted_losses(tmp_path):
    tokenizer = bpe_tokenizer(tmp_path)
    corpus = tmp_path / "corpus"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "framework.cli.prepare_data",
            f"input={help_text(tmp_path)}",
            f"output={corpus}",
            f"tokenizer={tokenizer}",
            "workers=2",
            "piece_mb=0.1",
        ],
        check=True,
    )
    run = [*TOKENS, f"datamodule.path={corpus}", f"datamodule.tokenizer={tokenizer}", *CKPT]
    straight = fit(compose([*run, "strategy=single"]), output_dir=str(tmp_path / "straight"))
    kill = [
        "+callbacks.kill._target_=tests.helpers.probes.SignalAt",
        "+callbacks.kill.step=7",
        "+callbacks.kill.signal=SIGKILL",
        "+callbacks.kill.rank=1",
    ]
    with pytest.raises(RuntimeError, match="rank 1 failed: killed by SIGKILL.* holds step 6"):
        fit(compose([*run, "strategy=ddp", "trainer.devices=2", *kill]), output_dir=str(tmp_path / "killed"))
    resumed = fit(
        compose(
            [
                *run,
                "strategy=single",
                "datamodule.num_workers=2",
                f"ckpt_path={tmp_path / 'killed' / 'checkpoints' / 'last'}",
            ]
        ),
        output_dir=str(tmp_path / "resumed"),
    )
    assert straight["epochs"] == resumed["epochs"] == 1 and resumed["steps"] == straight["steps"] == 12
    expected, got = train_losses(tmp_path / "straight"), train_losses(tmp_path / "resumed")
    assert len(expected) == 12 and len(got) == 6  # steps 7..12, after the step-6 checkpoint
    assert got == pytest.approx(expected[6:], abs=1e-6)


GIB = 2**30
SHARD_TOKENS = 128 * 2**20  # 256 MiB of uint16 tokens a shard


@pytest.fixture
def two_gigabytes(tmp_path):
    """The help text prepared as bytes, its train split extended by 8 shards of random byte tokens
    (2 GiB), documents of a million tokens each; removed after the test."""
    corpus = prepared_help(tmp_path)
    index = read_index(corpus)
    rng = np.random.default_rng(0)
    for n in range(8):
        tokens = rng.integers(0, 256, size=SHARD_TOKENS, dtype=np.uint16)
        entry = write_shard(corpus, f"random-{n}.train", tokens, np.arange(0, SHARD_TOKENS, 2**20))
        index["splits"]["train"].append(entry)
        del tokens
    index["tokens"]["train"] = sum(s["tokens"] for s in index["splits"]["train"])
    write_index(corpus, index)
    yield corpus
    shutil.rmtree(corpus, ignore_errors=True)


def resident_mib(output_dir) -> tuple[list[float], float]:
    """Rank 0's resident memory at each log, and the peak over every rank and log."""
    with open(output_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("device/max_rss_mib_max_rank")]
    return [float(r["device/rss_mib"]) for r in rows], max(float(r["device/max_rss_mib_max_rank"]) for r in rows)


def test_two_gigabytes_of_tokens_train_on_two_ranks_in_little_memory_on_the_sampled_windows(two_gigabytes, tmp_path):
    corpus = two_gigabytes
    assert sum((corpus / s["file"]).stat().st_size for s in read_index(corpus)["splits"]["train"]) >= 2 * GIB
    run = [
        *TOKENS,
        f"datamodule.path={corpus}",
        "datamodule.seq_len=64",
        "datamodule.batch_size=16",
        "trainer.max_steps=50",
        "callbacks=device_stats",
        "callbacks.device_stats.every_n_steps=10",
    ]
    two = fit(compose([*run, "strategy=ddp", "trainer.devices=2"]), output_dir=str(tmp_path / "two"))
    assert two["status"] == "completed" and two["world_size"] == 2 and two["steps"] == 50
    resident, peak = resident_mib(tmp_path / "two")
    assert peak < 1536  # each rank's peak resident memory
    assert resident[-1] - resident[0] < 64  # flat from step 10 to 50 (mapped pages grew 13 MiB a step)
    fit(compose([*run, "strategy=single"]), output_dir=str(tmp_path / "one"))
    assert train_losses(tmp_path / "two") == pytest.approx(train_losses(tmp_path / "one"), rel=1e-5)
    # the windows of those 50 steps, as the datamodule reads them and as plain reads of the files give them
    data = TokensDataModule(str(corpus), seq_len=64)
    data.setup("fit")
    windows = data.train_set
    order = iter(ShardedSampler(len(windows), seed=3, drop_last_multiple=16))
    chosen = [next(order) for _ in range(50 * 16)]
    assert max(chosen) > len(windows) // 2  # spread over the whole corpus, not its first shard
    bounds = windows.bounds
    for index in chosen[::25]:
        start = index * 64
        shard = int(np.searchsorted(bounds, start, side="right")) - 1
        path = corpus / read_index(corpus)["splits"]["train"][shard]["file"]
        raw = np.fromfile(path, dtype=np.uint16, count=65, offset=2 * int(start - bounds[shard]))
        if len(raw) == 65:  # (a window over a shard's end is checked by the datamodule's own test)
            assert windows[index][0].tolist() == raw[:64].tolist() and windows[index][1].tolist() == raw[1:].tolist()
