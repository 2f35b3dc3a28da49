"""Context and expert parallelism against FSDP on the same ranks, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/degrees.py [--steps 20] [--repeats 3]

1. the transformer (model=gpt, batches of 16 windows of 256 bytes) on 2 gloo ranks: fsdp (each
   rank a whole sequence of half the batch) against strategy=parallel strategy.cp=2 (each rank half
   of every sequence, keys and values all-gathered in every attention layer);
2. the same with a mixture of experts (4 experts, top 2): fsdp (every expert's weights gathered on
   every rank) against strategy=parallel strategy.ep=2 (two experts per rank, tokens exchanged by
   all-to-all).

Each figure is tokens/s from the run's median step time, the median over repeats that alternate
between the two sides; beside it the peak memory of rank 0 (CPU: the process's peak RSS, which
counts the interpreter too). The ratio is the degree's / fsdp's.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank, set before torch loads

import argparse
import logging
import statistics
import tempfile

from timed_run import TIMED_RUN

from framework import compose, fit

BATCH, SEQ = 16, 256
RUN = [
    "experiment=gpt_text",
    f"datamodule.batch_size={BATCH}",
    f"datamodule.seq_len={SEQ}",
    "trainer.devices=2",
    "trainer.accelerator=cpu",
    *TIMED_RUN,
]
PAIRS = {
    "context parallel (gpt)": ([], ["strategy=fsdp"], ["strategy=parallel", "strategy.cp=2"]),
    "expert parallel (gpt, 4 experts)": (
        ["model.n_experts=4", "model.top_k=2"],
        ["strategy=fsdp"],
        ["strategy=parallel", "strategy.ep=2"],
    ),
}


def run(overrides: list[str], steps: int) -> tuple[float, float]:
    """(tokens/s, rank 0's peak memory in MiB) of one run."""
    with tempfile.TemporaryDirectory() as out:
        results = fit(compose([*RUN, f"trainer.max_steps={steps}", *overrides]), output_dir=out)
    step_s = results["throughput"]["step_time_ms_median"] / 1e3
    return BATCH * SEQ / step_s, results["memory"]["peak_bytes_per_rank"][0] / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    for label, (model, base, degree) in PAIRS.items():
        sides = {"fsdp": [], "degree": []}
        for _ in range(args.repeats):  # alternating: noise hits both sides alike
            sides["fsdp"].append(run([*model, *base], args.steps))
            sides["degree"].append(run([*model, *degree], args.steps))
        fsdp, other = (statistics.median(t for t, _ in sides[k]) for k in ("fsdp", "degree"))
        memory = {k: statistics.median(m for _, m in sides[k]) for k in sides}
        print(
            f"{label}: fsdp {fsdp:,.0f} tokens/s ({memory['fsdp']:.0f} MiB), {' '.join(degree[1:])} "
            f"{other:,.0f} tokens/s ({memory['degree']:.0f} MiB), ratio {other / fsdp:.2f}"
        )


if __name__ == "__main__":
    main()
