"""Sweep report: ``python -m framework.report <sweep dir> [...]`` (also run at the end of every multirun).

Reads each job's ``results.json`` (and ``metrics.csv`` for loss curves) and writes, into
the sweep directory: ``report.csv``, ``summary.csv`` (jobs that differ only in ``seed`` as one
setting, each final metric's mean, standard deviation and 95% interval over its seeds), ``report.md``
(a table of jobs with strategy, devices, status, steady-state samples/s, speed-up over 1 device of
the same strategy (flagged as noise when it cannot be true), scaling efficiency, the loss difference
from the 1-device job, peak memory and model-state bytes per rank, predicted model state, bytes sent per step, every
final val/test metric the jobs logged, the rank by ``optimized_metric``, wall time) and plots:
``throughput.png``, ``memory.png``, ``loss_curves.png``.
Works on an interrupted sweep: jobs without results are listed as ``missing``.

Jobs are compared by their overrides (recorded in ``results.json``): every swept key other
than ``strategy`` and ``trainer.devices`` gets a column, and speed-up compares a job with the
1-device job that has the same values of those keys (so a sweep over learning rates and
device counts scales each learning rate against its own baseline). A timing section splits
the sweep's wall time into training, testing, rank start-up and the per-job overhead left.

Modules: ``rows`` (results.json -> rows), ``compare`` (across jobs), ``table`` (report.csv/.md),
``settings`` and ``statistics`` (the seeds aggregated: summary.csv), ``session`` (a sweep continued or
stopped), ``plots``, ``timing``, ``callback`` (the Hydra callback). A plug-in layer: may import engine and
every layer below it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.report.callback import SweepReport, finish_sweep
from framework.report.rows import SWEEP_FILE, collect, collect_many
from framework.report.table import write_report

__all__ = ["SWEEP_FILE", "SweepReport", "collect", "collect_many", "finish_sweep", "main", "write_report"]


USAGE = (
    "usage: framework-report <sweep dir> [<sweep dir> ...]   (or python -m framework.report ...)\n"
    "Writes report.md, report.csv, summary.csv and the plots of a sweep directory "
    "(outputs/multirun/<date>/<time>) again, from its jobs' results.json. Several directories (a study "
    "continued in another sweep) are reported together, into the first one."
)


def main() -> None:
    args = sys.argv[1:]
    if args in (["-h"], ["--help"]):
        print(USAGE)
        sys.exit(0)
    if not args:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    problems = [_not_a_sweep(Path(a)) for a in args]
    if any(problems):
        print("\n".join(p for p in problems if p), file=sys.stderr)
        sys.exit(2)
    if len(args) == 1:
        print(write_report(args[0]))
        return
    dirs = [Path(a) for a in args]
    print(write_report(dirs[0], collect_many(dirs), together=dirs[1:]))


def _not_a_sweep(path: Path) -> str | None:
    """Why ``path`` is not a sweep directory to report (None: it is one)."""
    if not path.is_dir():
        return f"{path}: no such directory; name a sweep directory (outputs/multirun/<date>/<time>)"
    if (path / "results.json").exists():
        return (
            f"{path} is one run's directory; the report compares the jobs of a sweep directory "
            f"(outputs/multirun/<date>/<time>)"
        )
    return None
