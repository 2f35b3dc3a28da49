"""report.csv and report.md: the jobs' table, the best job, footnotes, timing and plots."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from framework.report.compare import sweep_line, swept_keys
from framework.report.plots import plots
from framework.report.rows import NOISY_SPREAD, collect, metric_columns, sweep_record
from framework.report.session import session_lines
from framework.report.settings import summary_lines, write_summary
from framework.report.tensorboard_runs import link_tensorboard_runs
from framework.report.timing import timing

# The swept parameters come after "job", then one column per metric the jobs logged (val/*,
# test/*: the task's own), then LAST_COLUMNS.
COLUMNS = [
    "job",
    "strategy",
    "devices",
    "world_size",
    "status",
    "samples_per_s",
    "speedup",
    "efficiency",
    "loss_rel_diff",
    "peak_mem_mib",
    "model_state_bytes",
    "predicted_model_state_bytes",
    "comm_bytes_per_step",
    "comm_algorithm",
]
# In report.csv only (the table in report.md is wide enough), after samples_per_s.
CSV_ONLY = ["samples_per_s_min", "samples_per_s_max", "accelerator", "parameters"]
LAST_COLUMNS = ["rank", "wall_time_s", "notes", "reason"]
STATUSES = ["completed", "invalid", "failed", "missing", "interrupted", "diverged"]


def fmt(value) -> str:
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


def write_report(sweep_dir: str | Path, rows: list[dict] | None = None, together: list[Path] | None = None) -> Path:
    """Write report.csv, report.md, summary.csv and the plots into ``sweep_dir`` (from ``rows``, else
    ``collect(sweep_dir)``); returns report.md's path. ``together``: the other sweep directories whose
    jobs ``rows`` hold too (collect_many): the report is of them all, without a timing of one sweep."""
    sweep_dir = Path(sweep_dir)
    rows = collect(sweep_dir) if rows is None else rows
    sweep = sweep_record(sweep_dir)
    if together:  # several sweeps' jobs: the first one's objective, no session of one of them
        sweep = {k: sweep.get(k) for k in ("optimized_metric", "optimized_mode")}
    params = [k for k in swept_keys(rows) if k not in ("strategy", "trainer.devices")]
    for row in rows:
        row.update({k: (row.get("overrides") or {}).get(k) for k in params})
        # one line per strategy and swept value in the plots: "ddp optimizer.lr=0.001"
        row["series"] = " ".join([str(row.get("strategy"))] + [f"{k}={row[k]}" for k in params])
    objective = _objective(sweep)
    _rank(rows, *objective)
    columns, at = _columns(rows, params)
    with open(sweep_dir / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns[:at] + CSV_ONLY + columns[at:], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    metrics = metric_columns(rows)
    write_summary(sweep_dir, rows, metrics)
    lines = [
        f"# Sweep report: {' + '.join(map(str, [sweep_dir, *(together or [])]))}",
        "",
        ", ".join(f"{sum(r.get('status') == s for r in rows)} {s}" for s in STATUSES) + ".",
        "",
        sweep_line(rows),
        "",
        *session_lines(sweep),
        *_jobs_table(rows, columns),
        *_best_job(rows, objective, params),
        "",
        *summary_lines(rows, metrics, *objective),
        *footnotes(rows),
        *([] if together else timing(sweep, rows)),
        "",
    ]
    runs = link_tensorboard_runs(sweep_dir, rows)
    if runs is not None:
        lines += [f"TensorBoard, one run per job named after its swept values: `tensorboard --logdir {runs}`", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots(sweep_dir, rows)]
    (sweep_dir / "report.md").write_text("\n".join(lines) + "\n")
    return sweep_dir / "report.md"


def _jobs_table(rows: list[dict], columns: list[str]) -> list[str]:
    return [
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
        *(
            "| " + " | ".join(fmt(row.get(c)).replace("|", "/").replace("\n", " ")[:200] for c in columns) + " |"
            for row in rows
        ),
    ]


def _best_job(rows: list[dict], objective: tuple[str, str], params: list[str]) -> list[str]:
    best = next((r for r in rows if r.get("rank") == 1), None)
    if best is None:
        return []
    metric, mode = objective
    return [
        "",
        f"Best by {metric} ({mode}): job {best['job']} ({fmt(best[metric])}), "
        + ", ".join(f"{k}={best.get(k)}" for k in ["strategy", "devices", *params])
        + _ties(rows, best, metric),
    ]


def _ties(rows: list[dict], best: dict, metric: str) -> str:
    """The other jobs whose ``metric`` is the best's to float tolerance: the pick among them is arbitrary."""
    value = best[metric]
    tied = [
        str(r["job"])
        for r in rows
        if r is not best and isinstance(r.get(metric), (int, float)) and math.isclose(r[metric], value, rel_tol=1e-5)
    ]
    return f" (tied to 1e-5 with job(s) {', '.join(tied)})" if tied else ""


def _columns(rows: list[dict], params: list[str]) -> tuple[list[str], int]:
    """The report's columns for these rows, and where the CSV-only columns go (after throughput)."""
    columns = COLUMNS[:1] + params + COLUMNS[1:] + metric_columns(rows) + LAST_COLUMNS
    if any(beyond_data_parallel(row.get("degrees_by_name")) for row in rows):
        columns.insert(columns.index("world_size") + 1, "degrees")
    at = columns.index("samples_per_s") + 1
    if any(row.get("tokens_per_s") for row in rows):  # language models: tokens/s beside samples/s
        columns.insert(at, "tokens_per_s")
        at += 1
    if any(row.get("bubble_predicted") is not None for row in rows):  # pipelines: the bubble, planned and measured
        after = columns.index("predicted_model_state_bytes") + 1
        columns[after:after] = ["bubble_predicted", "bubble_measured"]
    return columns, at


def beyond_data_parallel(degrees) -> bool:
    """A layout with a degree above 1 other than dp_shard (hsdp, tp, cp, pp ...)."""
    return any(degree > 1 and name != "dp_shard" for name, degree in (degrees or {}).items())


def footnotes(rows: list[dict]) -> list[str]:
    """What the columns mean where a reader could misread them."""
    done = [r for r in rows if r.get("status") == "completed"]
    notes = [
        "samples_per_s: the steady-state steps only (the first steps, warm-up, left out); report.csv "
        "adds the slowest and fastest of its timing windows, or of its runs with benchmark_repeats=N "
        "(samples_per_s is then their median).",
        "loss_rel_diff: the largest relative train/loss difference, step by step, from the group's "
        "1-device job (single's when there is one); strategies that compute the same gradients show "
        "float noise (about 1e-6), algorithms that change them show their effect.",
    ]
    if any("noisy timing" in (r.get("notes") or "") for r in done):
        notes.append(
            f"Noted 'noisy timing': the fastest of the job's timing windows (or runs) was more than "
            f"{NOISY_SPREAD}x its slowest, so its samples/s is one point of a wide range: other processes, "
            "ranks sharing cores, or a short run. Compare such jobs with benchmark_repeats=3 or longer runs."
        )
    if done and not any(r.get("speedup") for r in done) and any((r.get("world_size") or 1) > 1 for r in done):
        notes.append(
            "speedup, efficiency and loss_rel_diff are empty: no job of the sweep ran on 1 device to "
            "compare with (add trainer.devices=1,... to the sweep)."
        )
    if any("noise:" in (r.get("notes") or "") for r in done):
        notes.append(
            "Flagged 'noise': a speed-up outside [1/N, N] for N ranks does not measure scaling. Above N, "
            "one of the two timings is off (the baseline ran slowly: the machine busy, caches, frequency); "
            "below 1/N, communication and start-up dwarf the compute, or the ranks share too few cores "
            "(a small model on CPU ranks). Re-run them with benchmark_repeats=3, longer, or on a quieter machine."
        )
    if any(r.get("bubble_predicted") is not None for r in done):
        notes.append(
            "bubble_predicted: the share of each step a pipeline's stage idles by its schedule, (p - 1) / "
            "(m + p - 1) for p stages and m micro-batches; bubble_measured: the share of its steps (after "
            "the first) that a stage spent outside its forward and backward, the mean over ranks "
            "(communication and the optimizer step count as idle here)."
        )
    if any(r.get("accelerator") == "cpu" for r in done):
        notes.append(
            "peak_mem_mib on CPU is the process's resident memory, which depends on how a rank "
            "started (in this process, or forked); memory.png shows the measured model state "
            "(parameters, gradients, optimizer state) per rank instead."
        )
    return [f"- {n}" for n in notes] + [""]


def _objective(sweep: dict) -> tuple[str, str]:
    """The sweep's optimized_metric and optimized_mode (recorded in sweep.json)."""
    return sweep.get("optimized_metric") or "val/loss", sweep.get("optimized_mode") or "min"


def _rank(rows: list[dict], metric: str, mode: str) -> None:
    """``rank``: 1 = the best completed job by ``metric`` (lowest for min, highest for max)."""
    scored = [r for r in rows if r.get("status") == "completed" and isinstance(r.get(metric), (int, float))]
    for i, row in enumerate(sorted(scored, key=lambda r: r[metric] if mode == "min" else -r[metric])):
        row["rank"] = i + 1
