"""Sweep report: ``python -m framework.report <sweep dir>`` (also run at the end of every multirun).

Reads each job's ``results.json`` (and ``metrics.csv`` for loss curves) and writes, into
the sweep directory: ``report.csv``, ``report.md`` (a table of jobs with strategy,
devices, status, samples/s, speed-up over 1 device of the same strategy, scaling
efficiency, peak memory and model-state bytes per rank, predicted model state, every final
val/test metric the jobs logged, the rank by ``optimized_metric``, wall time) and plots:
``throughput.png``, ``memory.png``, ``loss_curves.png``.
Works on an interrupted sweep: jobs without results are listed as ``missing``.

Jobs are compared by their overrides (recorded in ``results.json``): every swept key other
than ``strategy`` and ``trainer.devices`` gets a column, and speed-up compares a job with the
1-device job that has the same values of those keys (so a sweep over learning rates and
device counts scales each learning rate against its own baseline). A timing section splits
the sweep's wall time into training, testing, rank start-up and the per-job overhead left.
"""
from __future__ import annotations

import csv
import json
import logging
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf

from hydra.experimental.callback import Callback

from framework.engine.results import update_json, write_json

log = logging.getLogger(__name__)

# The sweep's own record (start, end, launcher), written by SweepReport.
SWEEP_FILE = "sweep.json"
# Then one column per metric the jobs logged (val/*, test/*: the task's own), then these.
COLUMNS = ["job", "strategy", "devices", "world_size", "status", "samples_per_s", "speedup", "efficiency",
           "peak_mem_mib", "model_state_bytes", "predicted_model_state_bytes", "comm_bytes_per_step", "comm_algorithm"]
LAST_COLUMNS = ["rank", "wall_time_s", "reason"]


def _jobs(sweep_dir: Path) -> list[Path]:
    """The job directories: those a job has started writing to (Hydra opens train.log first)."""
    return sorted((p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
                   and any((p / name).exists() for name in ("train.log", "config.yaml", "results.json"))),
                  key=lambda p: (not p.name.isdigit(), int(p.name) if p.name.isdigit() else p.name))


def job_overrides(job: dict) -> dict[str, str]:
    """A job's command-line overrides as {key: value}, without Hydra's own (hydra.*, hydra/*)."""
    out = {}
    for item in job.get("overrides") or []:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if sep and not key.startswith(("hydra.", "hydra/")):
            out[key] = value
    return out


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
        hydra_job = r.get("job") or {}
        row = {"job": job.name, "strategy": _strategy_label(r.get("strategy"), job_overrides(hydra_job)),
               "devices": r.get("devices"),
               "world_size": r.get("world_size"), "status": r.get("status"),
               "samples_per_s": (r.get("throughput") or {}).get("samples_per_s"),
               "peak_mem_mib": max(peaks) / 2**20 if peaks else None,
               "model_state_bytes": max(states) if states else None,
               "predicted_model_state_bytes": memory.get("predicted_model_state_bytes"),
               "comm_bytes_per_step": (r.get("comm") or {}).get("bytes_per_step"),
               "comm_algorithm": (r.get("comm") or {}).get("algorithm"),
               "wall_time_s": r.get("wall_time_s"),
               "reason": r.get("error") or r.get("reason") or "",
               # not columns: what the comparison groups and the timing section use
               "overrides": job_overrides(hydra_job), "job_time_s": hydra_job.get("time_s"),
               "started_at": hydra_job.get("started_at"),
               "fit_time_s": r.get("fit_time_s"), "test_time_s": r.get("test_time_s")}
        if r.get("failed_rank") is not None:
            row["reason"] = f"rank {r['failed_rank']}: {row['reason']}"
        row.update({k: v for k, v in metrics.items() if k.startswith(("val/", "test/"))})
        rows.append(row)
    _speedups(rows, swept_keys(rows))
    return rows


def _strategy_label(name, overrides: dict):
    """The strategy's name, or the config option that chose it when that says more
    (``strategy=bagua/bytegrad``: bagua with one of its algorithms)."""
    chosen = overrides.get("strategy") or ""
    return chosen if name and chosen.startswith(f"{name}/") else name


def swept_keys(rows: list[dict]) -> list[str]:
    """Override keys whose value differs between jobs, in command-line order."""
    recorded = [r["overrides"] for r in rows if r.get("overrides") is not None]
    keys = list(dict.fromkeys(k for overrides in recorded for k in overrides))
    return [k for k in keys if len({o.get(k) for o in recorded}) > 1]


def _is_strategy_key(key: str) -> bool:
    return key == "strategy" or key.startswith("strategy.")


def _speedups(rows: list[dict], swept: list[str]) -> None:
    """Speed-up over the 1-device job with the same swept parameters and strategy (or over
    single when that strategy has no 1-device job); only where device counts were compared."""
    scale = {"trainer.devices", "trainer.num_nodes"}

    def group(row):
        return tuple((row.get("overrides") or {}).get(k) for k in swept if k not in scale and not _is_strategy_key(k))

    def variant(row):
        return (row.get("strategy"),) + tuple((row.get("overrides") or {}).get(k) for k in swept if _is_strategy_key(k))

    done = [r for r in rows if r.get("status") == "completed" and r.get("samples_per_s")]
    base, single = {}, {}
    for row in done:
        if row.get("world_size") == 1:
            base.setdefault((group(row), variant(row)), row["samples_per_s"])
            if row["strategy"] == "single":
                single.setdefault(group(row), row["samples_per_s"])
    sizes: dict = {}
    for row in done:
        sizes.setdefault(group(row), set()).add(row.get("world_size"))
    for row in done:
        ref = base.get((group(row), variant(row))) or single.get(group(row))
        if ref and len(sizes[group(row)]) > 1:
            row["speedup"] = row["samples_per_s"] / ref
            row["efficiency"] = row["speedup"] / max(1, row.get("world_size") or 1)


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and "." in value:  # a swept float, as typed or sampled: 4 digits
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) >= 1e5:
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_report(sweep_dir: str | Path, rows: list[dict] | None = None) -> Path:
    """Write report.csv, report.md and the plots into ``sweep_dir`` (from ``rows``, else
    ``collect(sweep_dir)``); returns report.md's path."""
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir) if rows is None else rows
    params = [k for k in swept_keys(rows) if k not in ("strategy", "trainer.devices")]
    for row in rows:
        row.update({k: (row.get("overrides") or {}).get(k) for k in params})
        # one line per strategy and swept value in the plots: "ddp optimizer.lr=0.001"
        row["series"] = " ".join([str(row.get("strategy"))] + [f"{k}={row[k]}" for k in params])
    metrics = metric_columns(rows)
    objective = _objective(sweep_dir)
    _rank(rows, *objective)
    columns = COLUMNS[:1] + params + COLUMNS[1:] + metrics + LAST_COLUMNS
    with open(sweep_dir / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    plots = _plots(sweep_dir, rows)
    lines = [f"# Sweep report: {sweep_dir}", "",
             f"{sum(r.get('status') == 'completed' for r in rows)} completed, "
             f"{sum(r.get('status') == 'invalid' for r in rows)} invalid, "
             f"{sum(r.get('status') == 'failed' for r in rows)} failed, "
             f"{sum(r.get('status') == 'missing' for r in rows)} missing, "
             f"{sum(r.get('status') == 'interrupted' for r in rows)} interrupted, "
             f"{sum(r.get('status') == 'diverged' for r in rows)} diverged.", "",
             "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c)).replace("|", "/").replace("\n", " ")[:200]
                                       for c in columns) + " |")
    best = next((r for r in rows if r.get("rank") == 1), None)
    if best is not None:
        metric, mode = objective
        lines += ["", f"Best by {metric} ({mode}): job {best['job']} ({_fmt(best[metric])}), "
                      + ", ".join(f"{k}={best.get(k)}" for k in ["strategy", "devices", *params])]
    lines += ["", *timing(sweep_dir, rows), ""] + [f"![{p.stem}]({p.name})" for p in plots]
    (sweep_dir / "report.md").write_text("\n".join(lines) + "\n")
    return sweep_dir / "report.md"


def metric_columns(rows: list[dict]) -> list[str]:
    """Every val/* then test/* metric that some job logged."""
    names = {k for row in rows for k in row if k.startswith(("val/", "test/"))}
    return sorted(names, key=lambda k: (not k.startswith("val/"), k))


def _objective(sweep_dir: Path) -> tuple[str, str]:
    """The sweep's optimized_metric and optimized_mode (recorded in sweep.json)."""
    path = sweep_dir / SWEEP_FILE
    sweep = json.loads(path.read_text()) if path.exists() else {}
    return sweep.get("optimized_metric") or "val/loss", sweep.get("optimized_mode") or "min"


def _rank(rows: list[dict], metric: str, mode: str) -> None:
    """``rank``: 1 = the best completed job by ``metric`` (lowest for min, highest for max)."""
    scored = [r for r in rows if r.get("status") == "completed" and isinstance(r.get(metric), (int, float))]
    for i, row in enumerate(sorted(scored, key=lambda r: r[metric] if mode == "min" else -r[metric])):
        row["rank"] = i + 1


def timing(sweep_dir: Path, rows: list[dict]) -> list[str]:
    """Where the sweep's wall time went; the overhead per job is what is left after training,
    testing and rank start-up (the target is at most 2 s)."""
    ran = [r for r in rows if r.get("status") != "missing"]
    ends = [r["started_at"] + r["job_time_s"] for r in ran if r.get("started_at") and r.get("job_time_s")]
    sweep = json.loads((sweep_dir / SWEEP_FILE).read_text()) if (sweep_dir / SWEEP_FILE).exists() else {}
    start = sweep.get("started_at") or min((r["started_at"] for r in ran if r.get("started_at")), default=None)
    end = sweep.get("finished_at") or max(ends, default=None)
    if not ran or start is None or end is None:
        return []
    wall, n = end - start, len(ran)
    fit = sum(r.get("fit_time_s") or 0 for r in ran)
    test = sum(r.get("test_time_s") or 0 for r in ran)
    jobs = sum(r.get("job_time_s") or 0 for r in ran)
    # A job's time outside its rank 0: validating, starting the ranks, joining the group.
    startup = sum(r["job_time_s"] - (r.get("wall_time_s") or 0) for r in ran if r.get("job_time_s"))
    launcher = sweep.get("launcher") or "unknown"
    lines = ["## Timing", "",
             f"- sweep: {wall:.1f} s of wall time for {n} jobs (launcher: {launcher})"
             + ("" if sweep.get("finished_at") else ", up to the last job's end"),
             f"- in the jobs: training {fit:.1f} s, testing {test:.1f} s, rank start-up {startup:.1f} s "
             f"(validation, starting processes, joining the group), the ranks' own set-up "
             f"{jobs - startup - fit - test:.1f} s (data, model, loggers, checkpoints)"]
    if launcher not in ("basic", "unknown") or jobs > wall * 1.02:
        # Other launchers start each job in a process of its own (often several at once),
        # before the job's clock starts: the rest of the wall time is theirs, not the jobs'.
        lines.append(f"- the {launcher} launcher starts jobs in processes of their own, outside the jobs' "
                     f"measured time ({jobs:.1f} s of job time in {wall:.1f} s of sweep): "
                     "the per-job overhead is computed for the basic launcher only")
    else:
        per_job = (wall - fit - test) / n
        lines.append(f"- overhead per job: (wall - training - testing) / jobs = {per_job:.2f} s, "
                     f"of which rank start-up {startup / n:.2f} s; beyond it: {per_job - startup / n:.2f} s")
    return lines


def _plots(sweep_dir: Path, rows: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    done = [r for r in rows if r.get("status") == "completed"]
    paths = []
    for key, ylabel, name in [("samples_per_s", "samples/s", "throughput"),
                              ("peak_mem_mib", "peak memory per rank (MiB)", "memory")]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for series in sorted({r["series"] for r in done}):
            pts = sorted((r["world_size"], r[key]) for r in done if r["series"] == series and r.get(key))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=series)
        ax.set_xlabel("devices (world size)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        if ax.lines:
            ax.legend()
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
                ax.plot(*zip(*pts), label=f"{r['job']}: {r['series']} x{r['world_size']}")
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
    """Hydra callback: record the sweep's start, and write the report when the multirun ends."""

    def on_multirun_start(self, config, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if sweep_dir.is_dir() and not config.get("overwrite"):
            from framework.preflight import previous_run

            taken = [p.name for p in _jobs(sweep_dir) if previous_run(p)]
            if taken:  # before any job starts: the jobs would overwrite them one by one
                message = (f"hydra.sweep.dir: '{sweep_dir}' already holds the results of jobs {', '.join(taken)}; "
                           f"choose another hydra.sweep.dir, or set overwrite=true")
                log.error(message)
                print(message, file=sys.stderr)
                sys.exit(2)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        choices = OmegaConf.select(config, "hydra.runtime.choices", default={}) or {}
        write_json(sweep_dir / SWEEP_FILE, {
            "started_at": time.time(), "overrides": list(OmegaConf.select(config, "hydra.overrides.task") or []),
            "launcher": choices.get("hydra/launcher"), "sweeper": choices.get("hydra/sweeper"),
            "optimized_metric": config.get("optimized_metric"), "optimized_mode": config.get("optimized_mode")})

    def on_multirun_end(self, config, **kwargs) -> None:
        rows = finish_sweep(Path(config.hydra.sweep.dir))
        failed = [r["job"] for r in rows if r.get("status") == "failed"]
        if failed:  # the sweep's exit status: it ran to the end, but not every job did
            print(f"{len(failed)} job(s) failed: {', '.join(failed)}", file=sys.stderr)
            sys.exit(1)


def finish_sweep(sweep_dir: Path) -> list[dict]:
    """Record the sweep's end and write its report, from the jobs' results.json (so it holds
    whichever launcher ran them, and a sweep stopped by a signal); returns the rows."""
    update_json(sweep_dir / SWEEP_FILE, finished_at=time.time())
    rows = collect(sweep_dir)
    path = write_report(sweep_dir, rows)
    log.info("Sweep report: %s", Path(path).resolve())
    return rows


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python -m framework.report <sweep dir>", file=sys.stderr)
        sys.exit(2)
    if (Path(sys.argv[1]) / "results.json").exists():
        print(f"{sys.argv[1]} is one run's directory; the report compares the jobs of a sweep directory "
              f"(outputs/multirun/<date>/<time>)", file=sys.stderr)
        sys.exit(2)
    print(write_report(sys.argv[1]))


if __name__ == "__main__":
    main()
