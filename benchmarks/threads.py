"""Threads per rank, idle and beside another job: the default's figures.

    python benchmarks/threads.py [--repeats 3] [--workload "quick start"]

Each repeat runs, in rotating order, whole ``python -m framework.train`` processes of two
workloads with ``trainer.num_threads`` 1, the cores this process may use (2 here) and the default
(no setting: framework/rank/run.py's model_threads), first on an idle machine, then beside a load:
another process multiplying matrices on as many threads as there are cores (a second job on the
same machine). Workloads:
- quick start: the default experiment (digits_cnn, a small CNN), as the README's first command;
- gpt: experiment=gpt_text (2.5M parameters, batches of 32 x 128 tokens), 20 steps.
Reported per workload and condition: the median wall seconds of each thread count (min-max), the
median fit seconds (results.json's fit_time_s), the threads the default chose, and the ratio of
the two thread counts' medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKLOADS = {
    "quick start": [],
    "gpt": [
        "experiment=gpt_text",
        "trainer.max_steps=20",
        "trainer.val_check_interval=20",
        "trainer.limit_val_batches=2",
        "trainer.limit_test_batches=2",
        "predict=false",
    ],
}
LOAD = """
import torch
torch.set_num_threads({threads})
a = torch.randn(512, 512)
while True:
    a = torch.tanh(a @ a)
"""


def run_once(overrides: list[str], threads: int | None) -> tuple[float, float, int]:
    """(wall seconds, fit seconds, threads used) of one whole training command (``threads`` None:
    the default)."""
    setting = [] if threads is None else [f"trainer.num_threads={threads}"]
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "framework.train",
                *overrides,
                *setting,
                "trainer.enable_progress_bar=false",
                f"hydra.run.dir={scratch}/run",
            ],
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - started
        results = json.loads((Path(scratch) / "run" / "results.json").read_text())
        return wall, results["fit_time_s"], results["threads"]


def measure(workloads: dict, repeats: int, settings: list, cores: int, loaded: bool) -> dict:
    samples: dict = {(w, n): [] for w in workloads for n in settings}
    load = subprocess.Popen([sys.executable, "-c", LOAD.format(threads=cores)]) if loaded else None
    try:
        time.sleep(2.0 if loaded else 0.0)  # the load at full speed before the first sample
        for repeat in range(repeats):
            order = [(w, n) for w in workloads for n in settings]
            for workload, n in order[repeat % len(order) :] + order[: repeat % len(order)]:
                samples[(workload, n)].append(run_once(workloads[workload], n))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    return samples


def report(samples: dict, workloads: dict, settings: list, condition: str) -> None:
    for workload in workloads:
        cells = []
        for n in settings:
            walls = [s[0] for s in samples[(workload, n)]]
            fit = statistics.median(s[1] for s in samples[(workload, n)])
            name = f"default ({samples[(workload, n)][0][2]})" if n is None else str(n)
            cells.append(
                f"{name}: {statistics.median(walls):5.1f} s ({min(walls):.1f}-{max(walls):.1f}), fit {fit:5.1f} s"
            )
        one, many = (statistics.median(s[0] for s in samples[(workload, n)]) for n in settings[:2])
        ratio = f"wall {settings[1]}/{settings[0]} threads: {many / one:.2f}"
        print(f"{condition:<7} {workload:<12} {'  '.join(cells)}  {ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    args = parser.parse_args()
    workloads = {w: WORKLOADS[w] for w in args.workload or WORKLOADS}
    cores = len(os.sched_getaffinity(0))
    settings = [1, cores, None] if cores > 1 else [1, None]
    print(
        f"{cores} cores; threads per setting (default: the framework's choice); median of {args.repeats} runs "
        "each, interleaved"
    )
    for condition, loaded in (("idle", False), ("loaded", True)):
        report(measure(workloads, args.repeats, settings, cores, loaded), workloads, settings, condition)


if __name__ == "__main__":
    main()
