"""Throughput: samples/s to the loggers, and on CUDA the model FLOPs utilisation (MFU)."""

from __future__ import annotations

import time
from typing import Optional

import torch

from framework.config.ranges import Range

# Dense bf16 peak FLOP/s per device, by name fragment (vendor data sheets).
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


class Throughput:
    """Logs ``throughput/samples_per_s`` every ``log_every_n_steps`` optimizer steps, and
    ``throughput/mfu`` = achieved FLOP/s per device / ``peak_flops`` where a peak is known
    (null: from the CUDA device's name). FLOPs per sample are counted once on the first batch with torch's
    FlopCounterMode (forward x 3 for forward + backward)."""

    argument_ranges = {"log_every_n_steps": Range(low=1), "peak_flops": Range(low=0, strict=True)}

    def __init__(self, log_every_n_steps: int = 50, peak_flops: Optional[float] = None):
        self.log_every_n_steps, self.peak_flops = log_every_n_steps, peak_flops
        self.flops_per_sample: Optional[float] = None
        self._t0, self._samples0 = None, 0

    def on_fit_start(self, trainer) -> None:
        self._t0, self._samples0 = time.perf_counter(), trainer.train_samples
        if trainer.device.type == "cuda" and self.peak_flops is None:
            name = torch.cuda.get_device_name(trainer.device)
            self.peak_flops = next((v for k, v in PEAK_FLOPS.items() if k in name), None)

    def count_flops(self, model, batch) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        inputs = batch[0] if isinstance(batch, (list, tuple)) else batch
        # Eval mode: the same FLOPs, without moving BatchNorm's running statistics.
        training = model.training
        model.eval()
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(inputs)
        model.train(training)
        self.flops_per_sample = 3 * counter.get_total_flops() / inputs.shape[0]

    def on_train_step_end(self, trainer, loss) -> None:
        if self.peak_flops and self.flops_per_sample is None:  # MFU needs a peak (known on CUDA)
            self.count_flops(trainer.unwrapped_model, trainer.current_batch)
        if trainer.global_step % self.log_every_n_steps:
            return
        now = time.perf_counter()
        rate = (trainer.train_samples - self._samples0) / max(now - self._t0, 1e-9)
        metrics = {"throughput/samples_per_s": rate}
        if self.flops_per_sample and self.peak_flops:
            metrics["throughput/mfu"] = rate * self.flops_per_sample / trainer.world_size / self.peak_flops
        trainer.log_metrics(metrics)
        self._t0, self._samples0 = now, trainer.train_samples

    def on_validation_end(self, trainer, metrics: dict) -> None:
        self._t0 = time.perf_counter()  # validation time is not training throughput
