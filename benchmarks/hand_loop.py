"""The hand-written torch training loop the benchmarks compare the engine against."""

from __future__ import annotations

import statistics
import time

from torch.nn import functional as F


def median_step_time(model, optimizer, loader, steps: int, device=None, metrics=()) -> float:
    """Train ``steps`` steps the way a user writes it by hand; the median step time (s),
    each step timed from the end of the previous one (data loading included). On CUDA the
    batches move with ``non_blocking`` (the loader pins memory) and no step synchronises,
    as in the engine. ``metrics``: torchmetrics objects updated with every step's logits, beside
    the step's accuracy (what the engine's task does with train_metrics and task.metrics)."""
    model.train()
    times, t_prev = [], time.perf_counter()
    for i, (x, y) in enumerate(loader):
        if i >= steps:
            break
        if device is not None:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        # a language model's [batch, seq, vocab] logits: one token per row
        loss = F.cross_entropy(logits.flatten(0, -2), y.flatten()) if logits.dim() > 2 else F.cross_entropy(logits, y)
        if metrics:
            (logits.argmax(dim=-1) == y).float().mean()  # the accuracy: the engine computes it too
            for metric in metrics:
                metric.update(logits.detach(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.perf_counter()
        times.append(now - t_prev)
        t_prev = now
    return statistics.median(times)
