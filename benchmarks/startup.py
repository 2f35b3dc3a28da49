"""Start-up cost of the framework, as whole processes side by side in one run.

    python benchmarks/startup.py [--repeats 7]

Each repeat runs, in rotating order, whole Python processes:
- import torch: the floor every torch program pays;
- hand script: what a user writes by hand for one training step on the digits (load the
  shipped CSV, an MLP, Adam, one step);
- minimal CLI run: ``python -m framework.train`` with the same MLP for one step, no
  validation, test, callbacks or loggers;
- default CLI run, 1 step: the same with the default callbacks and loggers (checkpoint,
  TensorBoard, CSV);
- --help: ``python -m framework.train --help``.
Reported: min / median / max wall seconds, and min / median / max of each one's difference to
the hand script run in the same repeat.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HAND_SCRIPT = """
import gzip, sys, numpy as np, torch
from torch import nn
from torch.nn import functional as F
with gzip.open(sys.argv[1], "rt") as f:
    data = np.loadtxt(f, delimiter=",", dtype=np.float32)
x, y = torch.from_numpy(data[:32, :64] / 16.0), torch.from_numpy(data[:32, 64].astype(np.int64))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss = F.cross_entropy(model(x), y)
loss.backward()
optimizer.step()
print(float(loss))
"""
ONE_STEP = [
    "experiment=digits_mlp",
    "model.hidden_sizes=[64]",
    "trainer.max_steps=1",
    "trainer.limit_val_batches=0",
    "trainer.limit_test_batches=0",
    "trainer.enable_progress_bar=false",
]


def _digits_file() -> Path:
    """The shipped digits CSV, found without importing the framework (the hand script does not)."""
    spec = importlib.util.find_spec("framework")
    return Path(spec.submodule_search_locations[0]) / "data" / "assets" / "digits.csv.gz"


def commands(tmp: Path) -> dict[str, list[str]]:
    train = [sys.executable, "-m", "framework.train"]
    return {
        "import torch": [sys.executable, "-c", "import torch"],
        "hand script": [sys.executable, "-c", HAND_SCRIPT, str(_digits_file())],
        "minimal CLI run": [
            *train,
            *ONE_STEP,
            "callbacks=none",
            "logger=none",
            "overwrite=true",
            f"hydra.run.dir={tmp / 'minimal'}",
        ],
        "default CLI run": [*train, *ONE_STEP, "overwrite=true", f"hydra.run.dir={tmp / 'default'}"],
        "--help": [*train, "--help"],
    }


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{command} failed:\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cmds = commands(Path(tmp))
        names = list(cmds)
        times: dict[str, list[float]] = {name: [] for name in names}
        for name in names:  # warm-up: the OS file cache, Python's bytecode cache
            timed(cmds[name], Path(tmp))
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(timed(cmds[name], Path(tmp)))
    hand = times["hand script"]
    print(
        f"{args.repeats} interleaved repeats, wall seconds per process; '- hand script': the difference to the "
        "hand script of the same repeat"
    )
    print(f"{'':<18} {'min':>6} {'median':>7} {'max':>6}   {'- hand script: min':>18} {'median':>7} {'max':>6}")
    for name in names:
        t, diff = sorted(times[name]), sorted(a - b for a, b in zip(times[name], hand))
        print(
            f"{name:<18} {t[0]:>6.2f} {statistics.median(t):>7.2f} {t[-1]:>6.2f}   "
            f"{diff[0]:>+18.2f} {statistics.median(diff):>+7.2f} {diff[-1]:>+6.2f}"
        )


if __name__ == "__main__":
    main()
