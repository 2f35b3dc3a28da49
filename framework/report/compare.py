"""What the report computes across jobs: which keys were swept, each job's speed-up over its
1-device baseline (flagged when it cannot be true), and how far its losses are from that
baseline's (the framework's equivalence promise, shown)."""

from __future__ import annotations

import csv
from pathlib import Path

SCALE_KEYS = ("trainer.devices", "trainer.num_nodes")


def swept_keys(rows: list[dict]) -> list[str]:
    """Override keys whose value differs between jobs, in command-line order."""
    recorded = [r["overrides"] for r in rows if r.get("overrides") is not None]
    keys = list(dict.fromkeys(k for overrides in recorded for k in overrides))
    return [k for k in keys if len({o.get(k) for o in recorded}) > 1]


def sweep_line(rows: list[dict]) -> str:
    """What the jobs varied, and the overrides every job shared (report.md says what was compared)."""
    recorded = [r["overrides"] for r in rows if r.get("overrides") is not None]
    swept = swept_keys(rows)
    shared = [f"{k}={v}" for k, v in (recorded[0] if recorded else {}).items() if k not in swept]
    return f"Swept: {', '.join(swept) or 'nothing'}; every job: {', '.join(shared) or 'the defaults'}."


def is_strategy_key(key: str) -> bool:
    return key == "strategy" or key.startswith("strategy.")


def _group(row: dict, swept: list[str]) -> tuple:
    """The job's configuration apart from how it is parallelised (strategy, device counts)."""
    return tuple((row.get("overrides") or {}).get(k) for k in swept if k not in SCALE_KEYS and not is_strategy_key(k))


def _variant(row: dict, swept: list[str]) -> tuple:
    return (row.get("strategy"),) + tuple((row.get("overrides") or {}).get(k) for k in swept if is_strategy_key(k))


def _baselines(rows: list[dict], swept: list[str]) -> dict:
    """The 1-device jobs: {(group, variant): job}, {(group, "single"): the group's single job},
    {(group, "any"): its first 1-device job}."""
    base: dict = {}
    for row in rows:
        if row.get("status") == "completed" and row.get("world_size") == 1:
            group = _group(row, swept)
            base.setdefault((group, _variant(row, swept)), row)
            base.setdefault((group, "any"), row)
            if row["strategy"] == "single":
                base.setdefault((group, "single"), row)
    return base


def add_speedups(rows: list[dict], swept: list[str]) -> None:
    """Speed-up over the 1-device job with the same swept parameters and strategy (or over
    single when that strategy has no 1-device job); only where device counts were compared.
    One outside [1/N, N] for N ranks is not a measurement of scaling: flagged as noise."""
    base = _baselines(rows, swept)
    done = [r for r in rows if r.get("status") == "completed" and r.get("samples_per_s")]
    sizes: dict = {}
    for row in done:
        sizes.setdefault(_group(row, swept), set()).add(row.get("world_size"))
    for row in done:
        group = _group(row, swept)
        ref = base.get((group, _variant(row, swept))) or base.get((group, "single"))
        if ref is None or not ref.get("samples_per_s") or len(sizes[group]) < 2:
            continue
        world = max(1, row.get("world_size") or 1)
        row["speedup"] = row["samples_per_s"] / ref["samples_per_s"]
        row["efficiency"] = row["speedup"] / world
        if world > 1 and not 1 / world <= row["speedup"] <= world:
            flag(row, f"noise: a {row['speedup']:.2f}x speed-up on {world} ranks is outside [1/{world}, {world}]")


def flag(row: dict, note: str) -> None:
    row["notes"] = "; ".join(filter(None, [row.get("notes"), note]))


def add_loss_differences(rows: list[dict], swept: list[str]) -> None:
    """``loss_rel_diff``: the largest relative difference of a job's train/loss, step by step,
    from its group's 1-device job (single's when there is one)."""
    base = _baselines(rows, swept)
    cache: dict = {}  # each job's metrics.csv is read once, however many jobs compare with it

    def losses(row: dict) -> dict[int, float]:
        if row["job"] not in cache:
            cache[row["job"]] = train_losses(Path(row["path"]))
        return cache[row["job"]]

    for row in rows:
        group = _group(row, swept)
        ref = base.get((group, "single")) or base.get((group, "any"))
        if row.get("status") != "completed" or ref is None:
            continue
        mine, theirs = losses(row), losses(ref)
        common = [step for step in mine if step in theirs]
        if common:
            row["loss_rel_diff"] = max(abs(mine[s] - theirs[s]) / max(abs(theirs[s]), 1e-12) for s in common)


def train_losses(job_dir: Path) -> dict[int, float]:
    """{step: train/loss} of a job's metrics.csv ({} without one)."""
    path = job_dir / "metrics.csv"
    if not path.exists():
        return {}
    with open(path) as f:
        return {int(r["step"]): float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")}
