"""metrics.csv: one row per logged step, a column per metric (``step``, ``epoch`` first)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from framework.engine.attempts import lineage_file


class CSVLogger:
    """A step's row is appended and flushed as soon as a later step is logged (and at the end),
    so a killed run loses at most the step being logged. The file is rewritten whole only when
    a new column appears (``val/*`` after the first validation), through a temporary file and a
    rename, so a reader never sees half of it. A run resumed in the same directory continues
    the file: rows after the resumed step (logged before the interruption) are dropped; a later
    attempt in it writes its own (``record_in``)."""

    def __init__(self, save_dir: str, filename: str = "metrics.csv"):
        self.path = Path(save_dir) / filename
        self._rows: dict[int, dict] = {}  # step -> merged metrics logged at that step
        self._names: set[str] = set()  # every metric column
        self._columns: list[str] | None = None  # the metric columns of the file's header
        self._pending: set[int] = set()  # steps not in the file yet
        self._rewrite = False
        self._read(self.path)

    def _read(self, path: Path) -> None:
        """The rows of an earlier run's file, which this run continues."""
        self._rows = {}
        if path.exists():
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    step = int(row.pop("step"))  # popped first: the step is the key, not a column
                    self._rows[step] = {
                        k: int(float(v)) if k == "epoch" else float(v) for k, v in row.items() if v not in ("", None)
                    }
        self._names = {k for row in self._rows.values() for k in row} - {"epoch"}
        self._columns = sorted(self._names) if self._rows else None

    def record_in(self, directory: Path) -> None:
        """A later attempt in the run's directory: the file is written into ``directory`` (its
        ``attempts/<n>/``), continuing the newest of the run's and its earlier attempts' rows; the
        run's own file is replaced only when the attempt ends (engine/attempts.py)."""
        attempt = int(Path(directory).name) if Path(directory).name.isdigit() else None
        self._read(lineage_file(Path(directory).parent.parent, self.path.name, attempt))
        self.path = Path(directory) / self.path.name
        self._pending, self._rewrite = set(self._rows), bool(self._rows)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if step in self._rows and step not in self._pending:
            self._rewrite = True  # a step already in the file changed
        row = self._rows.setdefault(step, {})
        # the epoch a step was trained in: a test logged at the same step after fit (the epoch
        # counter past the last one by then) does not relabel it
        row.update({k: v for k, v in metrics.items() if not (k == "epoch" and "epoch" in row)})
        self._names.update(k for k in metrics if k != "epoch")
        self._pending.add(step)
        self._write(before=step)

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        pass  # the resolved config is saved beside it as config.yaml

    def resume(self, step: int) -> None:
        """The run continues from ``step``: rows logged after it belong to the lost future, and a
        test that ended the earlier run (``test/*``) is not part of the continued one."""
        dropped = [s for s in self._rows if s > step]
        for s in dropped:
            del self._rows[s]
            self._pending.discard(s)
        tested = [row for row in self._rows.values() if any(k.startswith("test/") for k in row)]
        for row in tested:
            for key in [k for k in row if k.startswith("test/")]:
                del row[key]
        if dropped or tested:
            self._rewrite = True
            self._write(before=step + 1)

    def finalize(self, status: str) -> None:
        self._write(before=float("inf"))

    def _write(self, before: float) -> None:
        ready = sorted(s for s in self._pending if s < before)
        columns = sorted(self._names)
        if not ready and not self._rewrite:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self._rewrite or columns != self._columns or not self.path.exists():
            tmp = self.path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="") as f:
                self._write_rows(
                    f, [s for s in sorted(self._rows) if s not in self._pending or s in ready], columns, header=True
                )
            os.replace(tmp, self.path)
        else:
            with open(self.path, "a", newline="") as f:
                self._write_rows(f, ready, columns, header=False)
        self._columns, self._rewrite = columns, False
        self._pending.difference_update(ready)

    def _write_rows(self, f, steps: list[int], columns: list[str], header: bool) -> None:
        writer = csv.writer(f)
        if header:
            writer.writerow(["step", "epoch", *columns])
        for step in steps:
            row = self._rows[step]
            writer.writerow([step, row.get("epoch", ""), *(row.get(n, "") for n in columns)])
        f.flush()
