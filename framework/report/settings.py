"""A sweep's settings: jobs that differ only in ``seed`` are one setting, and each final metric is
summarised over its seeds (statistics.py): ``summary.csv`` in the sweep directory and the same table in
report.md, the best setting with its interval, and every other setting's difference from it with
Welch's t interval, so that a difference can be told from the noise between seeds."""

from __future__ import annotations

import csv
from pathlib import Path

from framework.report.compare import swept_keys
from framework.report.statistics import CONFIDENCE, INSTALL, have_scipy, summarize, welch_difference

# The override whose values are repetitions of one setting, not settings of their own.
SEED = "seed"
STATS = ("mean", "std", "ci95_low", "ci95_high")


def setting_keys(rows: list[dict]) -> list[str]:
    """The swept keys that make a setting: every one but ``seed``."""
    return [k for k in swept_keys(rows) if k != SEED]


def settings(rows: list[dict]) -> list[dict]:
    """One entry per setting, in the order of its first job: ``values`` ({key: value}), ``jobs``
    (its rows) and ``done`` (those completed: what its statistics are over)."""
    keys, groups = setting_keys(rows), {}
    for row in rows:
        overrides = row.get("overrides") or {}
        groups.setdefault(tuple(overrides.get(k) for k in keys), []).append(row)
    return [
        {"values": dict(zip(keys, key)), "jobs": jobs, "done": [r for r in jobs if r.get("status") == "completed"]}
        for key, jobs in groups.items()
    ]


def label(setting: dict) -> str:
    """``optimizer.lr=0.01, strategy=ddp`` (every job, when the jobs differ only in their seeds)."""
    return ", ".join(f"{k}={v}" for k, v in setting["values"].items()) or "every job"


def summary(rows: list[dict], metrics: list[str]) -> list[dict]:
    """summary.csv's rows: the setting's keys, ``n`` (its completed jobs), then ``<metric>_mean``,
    ``_std``, ``_ci95_low``, ``_ci95_high`` of each metric over them."""
    out = []
    for setting in settings(rows):
        row = {**setting["values"], "n": len(setting["done"])}
        for metric in metrics:
            stats = summarize([r.get(metric) for r in setting["done"]])
            row.update({f"{metric}_{s}": stats[s] for s in STATS})
        out.append(row)
    return out


def write_summary(sweep_dir: Path, rows: list[dict], metrics: list[str]) -> list[dict]:
    """Write ``summary.csv`` into ``sweep_dir``; returns its rows."""
    table = summary(rows, metrics)
    columns = [*setting_keys(rows), "n", *(f"{m}_{s}" for m in metrics for s in STATS)]
    with open(sweep_dir / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in table)
    return table


def summary_lines(rows: list[dict], metrics: list[str], metric: str, mode: str) -> list[str]:
    """report.md's section of the settings: the table, the best by ``metric`` (``mode`` min or max)
    with its interval, and each other setting against it. Empty when no setting has two jobs."""
    groups = settings(rows)
    if all(len(s["jobs"]) < 2 for s in groups):
        return []
    table = summary(rows, metrics)
    keys = setting_keys(rows)
    lines = [
        "## Settings (jobs that differ only in seed)",
        "",
        f"Each metric: mean ± sample standard deviation (n - 1) [{CONFIDENCE:.0%} t interval of the mean], over "
        "the setting's completed jobs (n); a setting with n = 1 has neither. The same figures: summary.csv.",
        "",
        "| " + " | ".join([*keys, "n", *metrics]) + " |",
        "|" + "---|" * (len(keys) + 1 + len(metrics)),
    ]
    for row in table:
        lines.append(
            "| " + " | ".join([*(str(row[k]) for k in keys), str(row["n"]), *(_cell(row, m) for m in metrics)]) + " |"
        )
    lines += ["", *_against_the_best(groups, table, metric, mode)]
    if not have_scipy():
        lines += [f"No intervals: {INSTALL}.", ""]
    return lines


def _cell(row: dict, metric: str) -> str:
    mean, std = row[f"{metric}_mean"], row[f"{metric}_std"]
    if mean is None:
        return ""
    text = f"{mean:.4g}" + (f" ± {std:.2g}" if std is not None else "")
    low, high = row[f"{metric}_ci95_low"], row[f"{metric}_ci95_high"]
    return text + (f" [{low:.4g}, {high:.4g}]" if low is not None else "")


def _against_the_best(groups: list[dict], table: list[dict], metric: str, mode: str) -> list[str]:
    """The best setting by the mean of ``metric``, and each other's difference from it (Welch's t)."""
    scored = [(g, row) for g, row in zip(groups, table) if row.get(f"{metric}_mean") is not None]
    if not scored:
        return []
    best, best_row = (min if mode == "min" else max)(scored, key=lambda pair: pair[1][f"{metric}_mean"])
    interval = (
        f"{CONFIDENCE:.0%} interval [{best_row[f'{metric}_ci95_low']:.4g}, {best_row[f'{metric}_ci95_high']:.4g}]"
        if best_row[f"{metric}_ci95_low"] is not None
        else "no interval"
    )
    lines = [
        f"Best setting by {metric} ({mode}): {label(best)}: mean {best_row[f'{metric}_mean']:.4g}, {interval} "
        f"(n={best_row['n']}).",
        "",
    ]
    others = [(g, row) for g, row in scored if g is not best]
    if others:
        lines += [
            f"Against it, the difference of means of {metric} (the setting's minus the best's) with its "
            f"{CONFIDENCE:.0%} interval by Welch's t test (scipy.stats.ttest_ind, unequal variances):",
            "",
        ]
        for group, _ in others:
            found = welch_difference([r.get(metric) for r in group["done"]], [r.get(metric) for r in best["done"]])
            lines.append(f"- {label(group)}: {_difference(found, group, best)}")
        lines.append("")
    return lines


def _difference(found, group: dict, best: dict) -> str:
    if found is None:
        n = min(len(group["done"]), len(best["done"]))
        return "no interval (n = 1 on one side)" if n < 2 else f"no interval ({INSTALL})"
    difference, low, high = found
    verdict = "within the noise (the interval holds 0)" if low <= 0 <= high else "beyond the noise"
    return f"{difference:+.4g} [{low:+.4g}, {high:+.4g}]: {verdict}"
