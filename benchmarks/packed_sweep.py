"""A sweep of single-device jobs under hydra/launcher=packed against Hydra's basic launcher,
side by side in one run:

    python benchmarks/packed_sweep.py [--experiment digits_mlp] [--jobs 4] [--epochs 30] [--repeats 2]

Each repeat runs the same sweep (``experiment=digits_mlp seed=1..jobs``) under both launchers,
alternating which goes first; the figure is the median wall time of the whole command, packed /
basic (the target: <= 0.6 on 2 cores), and whether each job's train losses agree between them
(by default the packed jobs run one thread on one core each and the basic ones a thread per
core, whose sums differ in the last bits and drift apart over many steps; with --num-threads 1
they are identical).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def sweep(launcher: str, experiment: str, jobs: int, epochs: int, out: Path, threads: int | None) -> float:
    args = [
        sys.executable,
        "-m",
        "framework.train",
        "-m",
        f"experiment={experiment}",
        f"seed={','.join(str(s) for s in range(1, jobs + 1))}",
        f"trainer.max_epochs={epochs}",
        "callbacks.early_stopping=null",  # every job trains all its epochs: the same work under both
        *([f"trainer.num_threads={threads}"] if threads else []),
        "trainer.enable_progress_bar=false",
        f"hydra.sweep.dir={out}",
    ]
    if launcher == "packed":
        args.insert(4, "hydra/launcher=packed")
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def job_span(sweep_dir: Path, jobs: int) -> float:
    """From the first job's start to the last one's end (results.json's job record): the sweep
    without the command's start-up and its report."""
    records = [json.loads((sweep_dir / str(j) / "results.json").read_text())["job"] for j in range(jobs)]
    return max(r["started_at"] + r["time_s"] for r in records) - min(r["started_at"] for r in records)


def losses(job_dir: Path) -> list[float]:
    with open(job_dir / "metrics.csv") as f:
        return [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]


def largest_difference(a: Path, b: Path, jobs: int) -> float:
    worst = 0.0
    for j in range(jobs):
        for x, y in zip(losses(a / str(j)), losses(b / str(j)), strict=True):
            worst = max(worst, abs(x - y) / max(abs(x), 1e-12))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="digits_mlp")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--num-threads",
        type=int,
        default=None,
        help="trainer.num_threads for every job (1: the same float sums under both launchers)",
    )
    args = parser.parse_args()
    times: dict[str, list[float]] = {"basic": [], "packed": []}
    spans: dict[str, list[float]] = {"basic": [], "packed": []}
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            order = ("basic", "packed") if repeat % 2 == 0 else ("packed", "basic")
            for launcher in order:
                out = Path(scratch) / f"{launcher}{repeat}"
                times[launcher].append(sweep(launcher, args.experiment, args.jobs, args.epochs, out, args.num_threads))
                spans[launcher].append(job_span(out, args.jobs))
                print(
                    f"repeat {repeat + 1}: {launcher:<6} {times[launcher][-1]:.1f} s, jobs {spans[launcher][-1]:.1f} s",
                    flush=True,
                )
        diff = largest_difference(Path(scratch) / "basic0", Path(scratch) / "packed0", args.jobs)
    for what, figures in (("command", times), ("jobs' span", spans)):
        basic, packed = statistics.median(figures["basic"]), statistics.median(figures["packed"])
        print(f"{what}: basic {basic:.1f} s, packed {packed:.1f} s, packed / basic {packed / basic:.3f}")
    print(
        f"{args.jobs} jobs of {args.experiment}, {args.epochs} epochs, medians of {args.repeats}; train/loss "
        f"largest relative difference per step {diff:.2e}"
    )


if __name__ == "__main__":
    main()
