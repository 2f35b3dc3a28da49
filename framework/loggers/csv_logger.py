"""metrics.csv: one row per logged step, a column per metric (``step``, ``epoch`` first)."""
from __future__ import annotations

import csv
import os
from pathlib import Path


class CSVLogger:
    def __init__(self, save_dir: str, filename: str = "metrics.csv", flush_every_n_logs: int = 100):
        self.path = Path(save_dir) / filename
        self.flush_every_n_logs = flush_every_n_logs
        self._rows: dict[int, dict] = {}  # step -> merged metrics logged at that step
        self._logs = 0
        if self.path.exists():  # a resumed run in the same directory keeps the rows before it
            with open(self.path, newline="") as f:
                for row in csv.DictReader(f):
                    step = int(row.pop("step"))  # popped first: the step is the key, not a column
                    self._rows[step] = {k: int(float(v)) if k == "epoch" else float(v)
                                        for k, v in row.items() if v not in ("", None)}

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        self._rows.setdefault(step, {}).update(metrics)
        self._logs += 1
        if self._logs % self.flush_every_n_logs == 0:
            self.flush()

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        pass  # the resolved config is saved beside it as config.yaml

    def flush(self) -> None:
        # Columns can appear mid-run (val/* after the first validation), so rewrite the
        # whole file; write to a temporary file and rename so a reader never sees half of it.
        names = sorted({k for row in self._rows.values() for k in row} - {"epoch"})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["step", "epoch", *names])
            for step in sorted(self._rows):
                row = self._rows[step]
                writer.writerow([step, row.get("epoch", ""), *(row.get(n, "") for n in names)])
        os.replace(tmp, self.path)

    def finalize(self, status: str) -> None:
        if self._rows:
            self.flush()
