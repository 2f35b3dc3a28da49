"""DeepSpeed's ZeRO against torch's sharding on the built-in transformer, side by side in one run:

    OMP_NUM_THREADS=1 python benchmarks/zero_stages.py [--steps 30] [--repeats 3]

On 2 gloo ranks: tokens/s of strategy=deepspeed (stage 2, and 1 and 3 for the record) against
strategy=zero (torch's ZeroRedundancyOptimizer) and strategy=fsdp strategy.sharding=grad_op (FSDP2,
the same sharding as ZeRO-2), each the median over repeats that alternate between the layouts
(machine noise hits all alike); the ratio is deepspeed stage 2 / the other. And each layout's
model-state bytes per rank, measured by the run (results.json) against the plan's formula
(framework-plan's: the ZeRO paper's accounting, with DeepSpeed's fp32 master copy).
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

LAYOUTS = {
    "deepspeed_2": ["strategy=deepspeed", "strategy.stage=2"],
    "zero": ["strategy=zero"],
    "fsdp_grad_op": ["strategy=fsdp", "strategy.sharding=grad_op"],
    "deepspeed_1": ["strategy=deepspeed", "strategy.stage=1"],
    "deepspeed_3": ["strategy=deepspeed", "strategy.stage=3"],
}


def run(layout: str, steps: int, out: str) -> tuple[float, dict]:
    results = fit(compose(RUN + [f"trainer.max_steps={steps}", "trainer.devices=2", *LAYOUTS[layout]]), output_dir=out)
    return BATCH * SEQ / (results["throughput"]["step_time_ms_median"] / 1e3), results["memory"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    speed: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    memory: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in LAYOUTS:
                tokens, memory[name] = run(name, args.steps, f"{tmp}/{name}{repeat}")
                speed[name].append(tokens)
    median = {name: statistics.median(values) for name, values in speed.items()}
    params = memory["zero"]["parameters"]
    print(f"{params:,} parameters, 2 gloo ranks, {args.steps} steps x {args.repeats} repeats, batch {BATCH}x{SEQ}")
    print(f"{'layout':<14} {'tokens/s':>10} {'ds2 / it':>9} {'state B/param':>14} {'formula':>8}")
    for name in LAYOUTS:
        measured = memory[name]["model_state_bytes_per_rank"][0] / params
        predicted = memory[name]["predicted_model_state_bytes"] / params
        print(
            f"{name:<14} {median[name]:>10.0f} {median['deepspeed_2'] / median[name]:>9.3f} "
            f"{measured:>14.2f} {predicted:>8.2f}"
        )


if __name__ == "__main__":
    main()
