"""Sweep report: ``python -m framework.report <sweep dir>`` (also run at the end of every multirun).

Reads each job's ``results.json`` (and ``metrics.csv`` for loss curves) and writes, into
the sweep directory: ``report.csv``, ``report.md`` (a table of jobs with strategy,
devices, status, steady-state samples/s, speed-up over 1 device of the same strategy (flagged
as noise when it cannot be true), scaling efficiency, the loss difference from the 1-device job,
peak memory and model-state bytes per rank, predicted model state, bytes sent per step, every
final val/test metric the jobs logged, the rank by ``optimized_metric``, wall time) and plots:
``throughput.png``, ``memory.png``, ``loss_curves.png``.
Works on an interrupted sweep: jobs without results are listed as ``missing``.

Jobs are compared by their overrides (recorded in ``results.json``): every swept key other
than ``strategy`` and ``trainer.devices`` gets a column, and speed-up compares a job with the
1-device job that has the same values of those keys (so a sweep over learning rates and
device counts scales each learning rate against its own baseline). A timing section splits
the sweep's wall time into training, testing, rank start-up and the per-job overhead left.

Modules: ``rows`` (results.json -> rows), ``compare`` (across jobs), ``table`` (report.csv/.md),
``plots``, ``timing``, ``callback`` (the Hydra callback). A plug-in layer: may import engine and
every layer below it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from framework.report.callback import SweepReport, finish_sweep
from framework.report.rows import SWEEP_FILE, collect
from framework.report.table import write_report

__all__ = ["SWEEP_FILE", "SweepReport", "collect", "finish_sweep", "main", "write_report"]


USAGE = (
    "usage: framework-report <sweep dir>   (or python -m framework.report <sweep dir>)\n"
    "Writes report.md, report.csv and the plots of a sweep directory (outputs/multirun/<date>/<time>) again, "
    "from its jobs' results.json."
)


def main() -> None:
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(USAGE)
        sys.exit(0)
    if len(sys.argv) != 2:
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    if not Path(sys.argv[1]).is_dir():
        print(
            f"{sys.argv[1]}: no such directory; name a sweep directory (outputs/multirun/<date>/<time>)",
            file=sys.stderr,
        )
        sys.exit(2)
    if (Path(sys.argv[1]) / "results.json").exists():
        print(
            f"{sys.argv[1]} is one run's directory; the report compares the jobs of a sweep directory "
            f"(outputs/multirun/<date>/<time>)",
            file=sys.stderr,
        )
        sys.exit(2)
    print(write_report(sys.argv[1]))
