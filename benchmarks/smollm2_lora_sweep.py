"""The sweep that chose experiment=smollm2_lora's defaults: LoRA on SmolLM2-135M-Instruct over the
shipped instruction data's training split, for each learning rate and rank of the grid, 2 epochs:

    python benchmarks/smollm2_lora_sweep.py [--lr 1e-4 3e-4 1e-3] [--r 8 16] [--epochs 2] [--out DIR]

One Hydra multirun (``framework-train -m experiment=smollm2_lora optimizer.lr=... adapter.r=...``, its
jobs one after the other on this machine), then a table of each job's held-out validation loss at step
0 (the base: trainer.val_on_start) and after each epoch, and its held-out harness scores
(stdlib_modules, multiple choice; stdlib_modules_answer, the taught answer: exact match and the share
of bare names) against the base model's (harness.on_start, scored once: the first job). A default is
good when its validation loss falls and no harness score falls below the base's; the table marks the
job with the lowest final val/loss among those. Not a timed benchmark: the figures are scores.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

SCORES = [
    ("stdlib_modules", "acc"),
    ("stdlib_modules", "acc_norm"),
    ("stdlib_modules_answer", "exact_match:strip"),
    ("stdlib_modules_answer", "bare_name:strip"),
]


def sweep(lrs: list[str], ranks: list[str], epochs: int, out: Path) -> list[Path]:
    """Run the grid as one multirun (in ``out/sweep``); the jobs' directories in its order."""
    out = out / "sweep"
    command = [
        sys.executable,
        "-m",
        "framework.train",
        "-m",
        "experiment=smollm2_lora",
        f"optimizer.lr={','.join(lrs)}",
        f"adapter.r={','.join(ranks)}",
        f"trainer.max_epochs={epochs}",
        "harness.on_start=false",  # (the base's scores are the same for every job: once, below)
        "predict_on_start=false",
        "trainer.enable_progress_bar=false",
        f"hydra.sweep.dir={out}",
    ]
    subprocess.run(command, check=True)
    return sorted((p for p in out.iterdir() if (p / "results.json").is_file()), key=lambda p: int(p.name))


def base_scores(out: Path) -> dict:
    """The base model's harness scores and validation loss: one run that trains nothing."""
    run = out / "base"
    command = [sys.executable, "-m", "framework.train", "experiment=smollm2_lora", "train=false", "optimizer=none"]
    command += ["harness.on_start=false", "predict_on_start=false", "trainer.val_on_start=false", "predict=false"]
    subprocess.run([*command, f"hydra.run.dir={run}", "trainer.enable_progress_bar=false"], check=True)
    return json.loads((run / "results.json").read_text()).get("harness", {})


def val_losses(job: Path) -> list[float]:
    with open(job / "metrics.csv") as f:
        return [float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")]


def table(jobs: list[Path], base: dict) -> list[str]:
    head = ["job", "lr", "r", "val/loss: start", "after each epoch", *(f"{t}/{m}" for t, m in SCORES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines.append("| base | | | | | " + " | ".join(_cell(base, t, m) for t, m in SCORES) + " |")
    fits = {}
    for job in jobs:
        results = json.loads((job / "results.json").read_text())
        overrides = dict(o.lstrip("+").split("=", 1) for o in results["job"]["overrides"])  # (Hydra's ++key=)
        losses, scores = val_losses(job), results.get("harness", {})
        kept = all(scores.get(t, {}).get(m, 0) >= base.get(t, {}).get(m, 0) for t, m in SCORES)
        if losses and losses[-1] < losses[0] and kept:
            fits[job.name] = losses[-1]
        row = [job.name, overrides.get("optimizer.lr", ""), overrides.get("adapter.r", ""), f"{losses[0]:.4f}"]
        row += [", ".join(f"{v:.4f}" for v in losses[1:]), *(_cell(scores, t, m) for t, m in SCORES)]
        lines.append("| " + " | ".join(row) + " |")
    if fits:
        lines.append(f"\nBest that keeps every harness score at or above the base's: job {min(fits, key=fits.get)}")
    return lines


def _cell(scores: dict, task: str, metric: str) -> str:
    value = scores.get(task, {}).get(metric)
    return "" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lr", nargs="+", default=["1e-4", "3e-4", "1e-3"])
    parser.add_argument("--r", nargs="+", default=["8", "16"])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("outputs/benchmarks/smollm2_lora_sweep"))
    args = parser.parse_args()
    base = base_scores(args.out)  # (first: a refusal is met before the sweep's hour)
    jobs = sweep(args.lr, args.r, args.epochs, args.out)
    print("\n".join(table(jobs, base)))


if __name__ == "__main__":
    main()
