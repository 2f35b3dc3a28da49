"""A rank's log: rank 0 appends to the job's train.log (and prints), rank r writes
``ranks/<r>/train.log``."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
from pathlib import Path

FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# "0": rank 0 logs to its file only (framework.api.fit in a notebook, unless verbose=True).
CONSOLE_LOG = "FRAMEWORK_CONSOLE_LOG"


def configure_rank_logging(output_dir: str, rank: int) -> None:
    """Replace this (launched) process's root handlers with the rank's log file (and, on rank 0,
    the console)."""
    path = rank_log(output_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    formatter = logging.Formatter(FORMAT.replace("[%(name)s]", f"[rank {rank}][%(name)s]"))
    handlers: list[logging.Handler] = [logging.FileHandler(path)]
    if rank == 0:
        handlers.append(logging.StreamHandler(sys.stdout) if console_log() else ConsoleWarnings())
    for handler in handlers:
        handler.setFormatter(handler.formatter or formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    # a rank that dies of SIGABRT or SIGSEGV (a C++ abort in a library's thread) writes where each
    # of its threads was into its log: the launcher names the spot (launch/elastic.py)
    faulthandler.enable(file=handlers[0].stream, all_threads=True)


def console_log() -> bool:
    """Whether rank 0's log lines go to the console (else its warnings alone do: ``ConsoleWarnings``)."""
    return os.environ.get(CONSOLE_LOG, "1") != "0"


class ConsoleWarnings(logging.Handler):
    """A run's warnings on stderr where its log lines stay in train.log (``verbose=False``): a warning
    (examples cut to fit a window, ...) must not be seen only by whoever opens the file. Not a
    StreamHandler, so that a progress bar's redirect of the console's handlers (callbacks/progress.py)
    leaves it, and its level, alone."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.addFilter(lambda record: record.name.startswith("framework"))  # (not a library's notes)
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))  # (a line of its own: no timestamps)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: a handler never raises
            self.handleError(record)


def rank_log(output_dir: str, rank: int) -> Path:
    """Where rank ``rank`` of a run writes its log."""
    return Path(output_dir) / "train.log" if rank == 0 else Path(output_dir) / "ranks" / str(rank) / "train.log"
