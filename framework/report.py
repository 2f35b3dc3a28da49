"""Sweep report: ``python -m framework.report <sweep dir>`` (also run at the end of every multirun).

Reads each job's ``results.json`` (and ``metrics.csv`` for loss curves) and writes, into
the sweep directory: ``report.csv``, ``report.md`` (a table of jobs with strategy,
devices, status, samples/s, speed-up over 1 device of the same strategy, scaling
efficiency, peak memory and model-state bytes per rank, predicted model state, final
metrics, wall time) and plots: ``throughput.png``, ``memory.png``, ``loss_curves.png``.
Works on an interrupted sweep: jobs without results are listed as ``missing``.
"""
from __future__ import annotations

import csv
import json
import logging
import sys
from pathlib import Path

from hydra.experimental.callback import Callback

log = logging.getLogger(__name__)

# Job directories of this process's last multirun whose status is "failed" (its exit status).
SWEEP_FAILURES: list[str] = []

COLUMNS = ["job", "strategy", "devices", "world_size", "status", "samples_per_s", "speedup", "efficiency",
           "peak_mem_mib", "model_state_bytes", "predicted_model_state_bytes", "val/loss", "val/acc",
           "test/loss", "test/acc", "wall_time_s", "reason"]


def _jobs(sweep_dir: Path) -> list[Path]:
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
                  key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else p.name))


def collect(sweep_dir: Path) -> list[dict]:
    """One row per job directory of ``sweep_dir``."""
    rows = []
    for job in _jobs(sweep_dir):
        path = job / "results.json"
        if not path.exists():
            rows.append({"job": job.name, "status": "missing", "reason": "no results.json (interrupted?)"})
            continue
        r = json.loads(path.read_text())
        memory, metrics = r.get("memory") or {}, r.get("metrics") or {}
        peaks = [b for b in memory.get("peak_bytes_per_rank") or [] if b]
        states = [b for b in memory.get("model_state_bytes_per_rank") or [] if b]
        row = {"job": job.name, "strategy": r.get("strategy"), "devices": r.get("devices"),
               "world_size": r.get("world_size"), "status": r.get("status"),
               "samples_per_s": (r.get("throughput") or {}).get("samples_per_s"),
               "peak_mem_mib": max(peaks) / 2**20 if peaks else None,
               "model_state_bytes": max(states) if states else None,
               "predicted_model_state_bytes": memory.get("predicted_model_state_bytes"),
               "wall_time_s": r.get("wall_time_s"),
               "reason": r.get("error") or r.get("reason") or ""}
        if r.get("failed_rank") is not None:
            row["reason"] = f"rank {r['failed_rank']}: {row['reason']}"
        row.update({k: metrics.get(k) for k in ("val/loss", "val/acc", "test/loss", "test/acc")})
        rows.append(row)
    # Speed-up over 1 device of the same strategy (or of single when that strategy has no 1-device job).
    base = {}
    for row in rows:
        if row.get("status") == "completed" and row.get("world_size") == 1 and row.get("samples_per_s"):
            base.setdefault(row["strategy"], row["samples_per_s"])
    for row in rows:
        ref = base.get(row.get("strategy")) or base.get("single")
        if row.get("samples_per_s") and ref:
            row["speedup"] = row["samples_per_s"] / ref
            row["efficiency"] = row["speedup"] / max(1, row.get("world_size") or 1)
    return rows


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= 1e5:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_report(sweep_dir: str | Path) -> Path:
    """Write report.csv, report.md and the plots into ``sweep_dir``; returns report.md's path."""
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir)
    with open(sweep_dir / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    plots = _plots(sweep_dir, rows)
    lines = [f"# Sweep report: {sweep_dir}", "",
             f"{sum(r.get('status') == 'completed' for r in rows)} completed, "
             f"{sum(r.get('status') == 'invalid' for r in rows)} invalid, "
             f"{sum(r.get('status') == 'failed' for r in rows)} failed, "
             f"{sum(r.get('status') == 'missing' for r in rows)} missing.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)).replace("|", "/").replace("\n", " ")[:200]
                                       for c in COLUMNS) + " |")
    lines += [""] + [f"![{p.stem}]({p.name})" for p in plots]
    (sweep_dir / "report.md").write_text("\n".join(lines) + "\n")
    return sweep_dir / "report.md"


def _plots(sweep_dir: Path, rows: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.get("status") == "completed"]
    paths = []
    for key, ylabel, name in [("samples_per_s", "samples/s", "throughput"),
                              ("peak_mem_mib", "peak memory per rank (MiB)", "memory")]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for strategy in sorted({r["strategy"] for r in done}):
            pts = sorted((r["world_size"], r[key]) for r in done if r["strategy"] == strategy and r.get(key))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=strategy)
        ax.set_xlabel("devices (world size)")
        ax.set_ylabel(ylabel)
        ax.legend() if done else None
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(sweep_dir / f"{name}.png", dpi=100)
        plt.close(fig)
        paths.append(sweep_dir / f"{name}.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in done:
        path = sweep_dir / r["job"] / "metrics.csv"
        if path.exists():
            with open(path) as f:
                pts = [(int(x["step"]), float(x["train/loss"])) for x in csv.DictReader(f) if x.get("train/loss")]
            if pts:
                ax.plot(*zip(*pts), label=f"{r['job']}: {r['strategy']} x{r['world_size']}")
    ax.set_xlabel("step")
    ax.set_ylabel("train/loss")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sweep_dir / "loss_curves.png", dpi=100)
    plt.close(fig)
    return paths + [sweep_dir / "loss_curves.png"]


class SweepReport(Callback):
    """Hydra callback: write the report when a multirun ends."""

    def on_multirun_end(self, config, **kwargs) -> None:
        path = write_report(config.hydra.sweep.dir)
        log.info("Sweep report: %s", Path(path).resolve())
        # Read from the jobs' results.json, so it holds whichever launcher ran them.
        SWEEP_FAILURES[:] = [r["job"] for r in collect(Path(config.hydra.sweep.dir)) if r.get("status") == "failed"]


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python -m framework.report <sweep dir>", file=sys.stderr)
        sys.exit(2)
    print(write_report(sys.argv[1]))


if __name__ == "__main__":
    main()
