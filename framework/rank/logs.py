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
        loud = os.environ.get(CONSOLE_LOG, "1") != "0"
        handlers.append(logging.StreamHandler(sys.stdout) if loud else warnings_only())
    for handler in handlers:
        handler.setFormatter(handler.formatter or formatter)
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    # a rank that dies of SIGABRT or SIGSEGV (a C++ abort in a library's thread) writes where each
    # of its threads was into its log: the launcher names the spot (launch/elastic.py)
    faulthandler.enable(file=handlers[0].stream, all_threads=True)


def warnings_only() -> logging.Handler:
    """The console of a run that logs to its file only (``verbose=False``: a notebook, framework-generate,
    whose stdout is the continuations): the framework's warnings still reach the user, on stderr (a
    prompt cut to the model's positions, a template missing, a key ignored), in one line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.addFilter(lambda record: record.name.startswith("framework"))
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    return handler


def rank_log(output_dir: str, rank: int) -> Path:
    """Where rank ``rank`` of a run writes its log."""
    return Path(output_dir) / "train.log" if rank == 0 else Path(output_dir) / "ranks" / str(rank) / "train.log"
