"""strategy=auto's probe against running each candidate in full, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/auto_choice.py [--probe-steps 5] [--steps 30] [--repeats 2]

On 2 gloo ranks with the built-in transformer (benchmarks/transformer.py's run): one job with
``strategy=auto strategy.probe_steps=N`` (its probe's step time per candidate and its choice),
then every candidate trained alone for ``--steps`` steps, alternating over repeats; each figure
the median. The question it answers: is the probe's choice the fastest in full too.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per rank, set before torch loads

import argparse
import logging
import statistics
import tempfile

from transformer import BATCH, RUN, SEQ

from framework import compose, fit

CANDIDATES = {
    "ddp": ["strategy=ddp"],
    "zero": ["strategy=zero"],
    "fsdp_grad_op": ["strategy=fsdp", "strategy.sharding=grad_op"],
    "fsdp": ["strategy=fsdp"],
    "fsdp_tp": ["strategy=fsdp_tp"],
    "tp": ["strategy=tp"],
}


def tokens_per_s(results: dict) -> float:
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe-steps", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    base = RUN + [f"trainer.max_steps={args.steps}", "trainer.devices=2"]
    probed: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    full: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    choices = []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            auto = fit(
                compose([*base, "strategy=auto", f"strategy.probe_steps={args.probe_steps}"]),
                output_dir=f"{scratch}/auto{repeat}",
            )
            choices.append(auto["strategy_choice"]["chosen"])
            for row in auto["strategy_choice"]["candidates"]:
                probed[row["strategy"]].append(BATCH * SEQ / row["step_time_s"])
            names = list(CANDIDATES) if repeat % 2 == 0 else list(reversed(CANDIDATES))
            for name in names:
                full[name].append(
                    tokens_per_s(fit(compose([*base, *CANDIDATES[name]]), output_dir=f"{scratch}/{name}{repeat}"))
                )
            print(f"repeat {repeat + 1}: auto chose {choices[-1]}", flush=True)
    fastest = max(full, key=lambda n: statistics.median(full[n]))
    print(f"{'candidate':<14} {'probe tok/s':>12} {'full tok/s':>11} {'full / fastest':>15}")
    for name in CANDIDATES:
        print(
            f"{name:<14} {statistics.median(probed[name]):>12.0f} {statistics.median(full[name]):>11.0f} "
            f"{statistics.median(full[name]) / statistics.median(full[fastest]):>15.3f}"
        )
    print(
        f"auto chose {', '.join(choices)}; the fastest in full: {fastest} "
        f"({args.probe_steps} probe steps, {args.steps} full steps, medians of {args.repeats})"
    )


if __name__ == "__main__":
    main()
