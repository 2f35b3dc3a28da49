"""DeviceStats: the device's memory and the process's CPU use, logged as metrics (Lightning's
DeviceStatsMonitor)."""

from __future__ import annotations

import os
import resource
import time
from typing import Optional

import torch

from framework.config.ranges import ArgumentRanges, Range
from framework.strategies.comm.collectives import all_reduce

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_stats(device: torch.device) -> dict[str, float]:
    """This process's figures now: CUDA allocator memory on a GPU (MiB), resident memory on the
    CPU (MiB), and peaks."""
    mib = 2.0**20
    if device.type == "cuda":
        return {
            "memory_allocated_mib": torch.cuda.memory_allocated(device) / mib,
            "memory_reserved_mib": torch.cuda.memory_reserved(device) / mib,
            "max_memory_allocated_mib": torch.cuda.max_memory_allocated(device) / mib,
        }
    try:
        with open("/proc/self/statm") as f:  # Linux, in pages; elsewhere only the peak is known
            rss = int(f.read().split()[1]) * _PAGE / mib
    except OSError:
        rss = float("nan")
    # (the kernel's peak is sampled: it may trail the current figure a little)
    return {"rss_mib": rss, "max_rss_mib": max(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


class DeviceStats:
    """Every ``every_n_steps`` optimizer steps (and at each epoch's end), logs ``device/<stat>``:
    rank 0's memory figures, their maximum over the ranks (``device/<stat>_max_rank``), and the
    CPU time of rank 0's process per wall second since the last log (``device/cpu_util``: 1.0 =
    one core busy). All ranks take part (one small all-reduce per log)."""

    argument_ranges = {"every_n_steps": Range(low=1)}

    def __init__(self, every_n_steps: int = 50):
        ArgumentRanges.of(DeviceStats).check({"every_n_steps": every_n_steps}, "callbacks.device_stats")
        self.every_n_steps = every_n_steps
        self._last: Optional[tuple[float, float]] = None  # (wall, cpu seconds) of the last log

    def on_fit_start(self, trainer) -> None:
        self._last = (time.perf_counter(), time.process_time())

    def on_train_step_end(self, trainer, loss) -> None:
        if trainer.global_step % self.every_n_steps == 0:
            self._log(trainer)

    def on_train_epoch_end(self, trainer) -> None:
        self._log(trainer)

    def _log(self, trainer) -> None:
        stats = current_stats(trainer.device)
        values = torch.tensor(list(stats.values()), dtype=torch.float64, device=trainer.device)
        peaks = all_reduce(values, "max").tolist()
        out = {f"device/{k}": v for k, v in stats.items()}
        out.update({f"device/{k}_max_rank": v for k, v in zip(stats, peaks)})
        now = (time.perf_counter(), time.process_time())
        if self._last is not None and now[0] > self._last[0]:
            out["device/cpu_util"] = (now[1] - self._last[1]) / (now[0] - self._last[0])
        self._last = now
        trainer.log_metrics(out)
