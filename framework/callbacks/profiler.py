"""Profilers, chosen with ``trainer.profiler``: ``simple`` (wall time per loop section) or
``pytorch`` (a torch.profiler trace, viewable in TensorBoard or chrome://tracing)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path

import torch

log = logging.getLogger(__name__)


class SimpleProfiler:
    """Total and mean wall time of training steps, validation, test and epochs -> profile.txt (rank 0)."""

    def __init__(self, output_dir: str):
        self.path = Path(output_dir) / "profile.txt"
        self.totals: dict[str, list[float]] = defaultdict(list)
        self._start: dict[str, float] = {}

    def _begin(self, name: str) -> None:
        self._start[name] = time.perf_counter()

    def _end(self, name: str) -> None:
        if name in self._start:
            self.totals[name].append(time.perf_counter() - self._start.pop(name))

    def on_train_epoch_start(self, trainer) -> None:
        self._begin("train epoch")

    def on_train_epoch_end(self, trainer) -> None:
        self._end("train epoch")

    def on_validation_start(self, trainer) -> None:
        self._begin("validation")

    def on_validation_end(self, trainer, metrics) -> None:
        self._end("validation")

    def on_test_start(self, trainer) -> None:
        self._begin("test")

    def on_test_end(self, trainer, metrics) -> None:
        self._end("test")
        self._write(trainer)

    def on_fit_end(self, trainer) -> None:
        self.totals["optimizer step (data included)"] = list(trainer.step_times)
        self._write(trainer)

    def _write(self, trainer) -> None:
        if not trainer.is_global_zero:
            return
        lines = [f"{'section':<32} {'calls':>7} {'total s':>10} {'mean ms':>10}"]
        for name, times in sorted(self.totals.items(), key=lambda kv: -sum(kv[1])):
            lines.append(
                f"{name:<32} {len(times):>7} {sum(times):>10.3f} {1e3 * sum(times) / max(1, len(times)):>10.3f}"
            )
        self.path.write_text("\n".join(lines) + "\n")
        log.info("Profile (%s):\n%s", self.path, "\n".join(lines))


class PyTorchProfiler:
    """torch.profiler over training steps 2-6 (wait 1, warm-up 1, record 5) -> <output_dir>/profiler/."""

    def __init__(self, output_dir: str):
        self.dir = Path(output_dir) / "profiler"
        self.profiler = None

    def on_fit_start(self, trainer) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if trainer.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=1, warmup=1, active=5, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.dir), worker_name=f"rank{trainer.rank}"),
            record_shapes=True,
        )
        self.profiler.__enter__()

    def on_train_step_end(self, trainer, loss) -> None:
        if self.profiler is not None:
            self.profiler.step()

    def on_fit_end(self, trainer) -> None:
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            self.profiler = None

    def on_exception(self, trainer, error) -> None:
        self.on_fit_end(trainer)


PROFILERS = {"simple": SimpleProfiler, "pytorch": PyTorchProfiler}
