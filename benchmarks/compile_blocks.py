"""torch.compile on the CPU, side by side in one run: the built-in transformer (experiment=gpt_text,
2.5M parameters) eager, compiled whole (trainer.compile=true) and compiled block by block
(trainer.compile=blocks):

    OMP_NUM_THREADS=1 python benchmarks/compile_blocks.py [--steps 40] [--repeats 3]

Each figure is tokens/s from the run's median step time (the first steps, where compilation
happens, do not move a median of many), the median over repeats that rotate the three runs'
order; the ratios are compiled / eager. The compile time shows in the first step, reported apart.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread, set before torch loads

import argparse
import logging
import statistics
import tempfile

from timed_run import TIMED_RUN

from framework import compose, fit

BATCH, SEQ = 16, 128
RUN = [
    "experiment=gpt_text",
    f"datamodule.batch_size={BATCH}",
    f"datamodule.seq_len={SEQ}",
    *TIMED_RUN,
    "trainer.accelerator=cpu",
]
MODES = {"eager": "false", "whole": "true", "blocks": "blocks"}


def tokens_per_s(mode: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        results = fit(compose([*RUN, f"trainer.max_steps={steps}", f"trainer.compile={MODES[mode]}"]), output_dir=out)
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    names = list(MODES)
    figures: dict[str, list[float]] = {m: [] for m in names}
    for repeat in range(args.repeats):
        for mode in names[repeat % 3 :] + names[: repeat % 3]:  # rotate which goes first
            figures[mode].append(tokens_per_s(mode, args.steps))
    eager = statistics.median(figures["eager"])
    print(f"tokens/s, batch {BATCH} x {SEQ}, {args.steps} steps, median of {args.repeats}:")
    for mode in names:
        median = statistics.median(figures[mode])
        print(f"  {mode:<7} {median:10.0f}  {[round(f) for f in figures[mode]]}  x{median / eager:.2f}")


if __name__ == "__main__":
    main()
