"""The run directory (or a sweep's): what a run leaves there, and one writer at a time.

A run or a sweep holds an advisory lock (``flock``) on its directory itself for its whole life
(no lock file: the directory holds only what the run writes); the OS releases it when the process
ends, however it ends, so a crashed run never leaves a stale lock. A second run into the same
directory is refused at once, naming the first's process (from the kernel's table of locks).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from framework.config.errors import ConfigError


class DirectoryBusy(ConfigError):
    """Another run or sweep is writing into the directory."""


def _lock_holders(path: Path) -> list[int]:
    """The processes holding a flock on ``path`` (/proc/locks: 'N: FLOCK ADVISORY WRITE <pid> <maj:min:inode> ...')."""
    st = path.stat()
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    return [int(f[4]) for f in (line.split() for line in lines) if len(f) > 5 and f[1] == "FLOCK" and f[5] == key]


class DirectoryLock:
    """An exclusive flock on ``directory`` until ``release`` (or this process's end); ``key`` names
    the directory in the refusal (``output_dir``, ``hydra.sweep.dir``)."""

    def __init__(self, directory: Path, key: str = "output_dir"):
        self.path, self.key, self.fd = Path(directory), key, None

    def _describe_holder(self) -> str:
        pids = [pid for pid in _lock_holders(self.path) if pid != os.getpid()] or _lock_holders(self.path)
        return f"pid {pids[0]}" if pids else "another process"

    def acquire(self) -> "DirectoryLock":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError([f"{self.key}: cannot create '{self.path}': {err.strerror}"]) from None
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryBusy(
                [
                    f"{self.key}: '{self.path}' is being written by another run "
                    f"({self._describe_holder()}); wait for it to end, or choose another "
                    "directory"
                ]
            ) from None
        self.fd = fd
        return self

    def holder(self) -> str | None:
        """Who holds the lock now (None: nobody), without taking it."""
        if not self.path.is_dir():
            return None
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        except BlockingIOError:
            return self._describe_holder()
        finally:
            os.close(fd)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None

    def __enter__(self) -> "DirectoryLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def previous_run(directory: Path) -> list[str]:
    """What a finished or interrupted run left in ``directory`` that a new run would replace."""
    found = ["results.json"] if (directory / "results.json").exists() else []
    checkpoints = directory / "checkpoints"
    # `.old-<name>`: a checkpoint whose replacement was interrupted; it still counts
    if checkpoints.is_dir() and any(
        not p.name.startswith(".") or p.name.startswith(".old-") for p in checkpoints.iterdir()
    ):
        found.append("checkpoints/")
    return found


# What a run writes into its directory besides train.log (which Hydra has opened already):
# overwrite=true removes a previous run's copies, so that nothing of it mixes into the new one
# (config.yaml too: left there, it would make the new run a later attempt of the old one).
RUN_OUTPUTS = (
    "config.yaml",
    "results.json",
    "results.failed.json",
    "metrics.csv",
    "model.pt",
    "model.safetensors",
    "model_hf",
    "predictions.pt",
    "predictions.csv",
    "predictions.jsonl",
    "harness",
    "harness_start",
    "profile.txt",
    "tb",
    "wandb",
    "checkpoints",
    "ranks",
    "profiler",
    ".hydra",
    "attempts",
)
