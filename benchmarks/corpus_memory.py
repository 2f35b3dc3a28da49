"""A rank's resident memory against the size of the corpus it trains on, side by side in one run:

    python benchmarks/corpus_memory.py [--steps 200] [--devices 2] [--keep DIR]

Two prepared corpora of random byte tokens, 100 MB and 1 GB of shards (documents of a million tokens),
each trained on for ``--steps`` steps of the tiny transformer under ddp on ``--devices`` ranks (the
engine's sampler, the shards' checksums checked in the background, the windows read by position).
Each figure is the peak resident memory over every rank (the device_stats callback's), and the
difference between the two corpora: it should not grow with the corpus (the issue's target: within
5 MB). ``--keep DIR`` keeps the corpora there for another run (about 1.1 GB).
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

import numpy as np

from framework import compose, fit
from framework.data.token_shards import FORMAT, identity, token_dtype, write_index, write_shard

SHARD = 50 * 2**20  # tokens a shard: 100 MiB of uint16


def corpus(directory: Path, shards: int) -> Path:
    """``shards`` shards of random byte tokens, written as framework-prepare-data writes them."""
    if (directory / "index.json").is_file():
        return directory
    rng, entries = np.random.default_rng(0), []
    for n in range(shards):
        tokens = rng.integers(0, 256, size=SHARD, dtype=np.uint16)
        entries.append(write_shard(directory, f"random-{n}.train", tokens, np.arange(0, SHARD, 2**20)))
    val = write_shard(directory, "random.val", rng.integers(0, 256, size=2**16, dtype=np.uint16), np.zeros(1, np.int64))
    index = {
        "format": FORMAT,
        "dtype": token_dtype(256),
        "tokenizer": {"fingerprint": "bytes", "file": None, "vocab_size": 256},
        "vocab_size": 256,
        "eos_id": None,
        "settings": {},
        "inputs": [],
        "documents": shards * (SHARD // 2**20) + 1,
        "tokens": {"train": shards * SHARD, "val": 2**16, "test": 0},
        "splits": {"train": entries, "val": [val], "test": []},
    }
    write_index(directory, index)
    assert identity(index)["train"]
    return directory


def peak_mib(path: Path, steps: int, devices: int, out: Path) -> float:
    run = [
        "model=gpt/tiny",
        "datamodule=tokens",
        f"datamodule.path={path}",
        "task=language_modeling",
        "datamodule.seq_len=128",
        "datamodule.batch_size=16",
        f"trainer.max_steps={steps}",
        "trainer.limit_val_batches=0",
        "trainer.enable_progress_bar=false",
        "test=false",
        "logger=csv",
        "callbacks=device_stats",
        "callbacks.device_stats.every_n_steps=10",
        "strategy=ddp",
        f"trainer.devices={devices}",
    ]
    fit(compose(run), output_dir=str(out))
    with open(out / "metrics.csv") as f:
        return max(
            float(r["device/max_rss_mib_max_rank"]) for r in csv.DictReader(f) if r.get("device/max_rss_mib_max_rank")
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--keep")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp())
    small, large = corpus(root / "100MB", 1), corpus(root / "1GB", 10)
    runs = Path(tempfile.mkdtemp())
    figures = {
        name: peak_mib(path, args.steps, args.devices, runs / name) for name, path in (("100MB", small), ("1GB", large))
    }
    for name, mib in figures.items():
        print(f"  {name:6s} of shards: peak resident memory per rank {mib:8.1f} MiB")
    print(f"  1 GB - 100 MB: {figures['1GB'] - figures['100MB']:+.1f} MiB")


if __name__ == "__main__":
    main()
