"""ModelSummary: the model's parameters per module at fit start (Lightning's, on by default)."""

from __future__ import annotations

import logging

from framework.engine.memory import whole_numel

log = logging.getLogger(__name__)


def _count(params) -> tuple[int, int]:
    """(trainable, frozen) elements; a sharded parameter counts whole."""
    trainable = frozen = 0
    for p in params:
        n = whole_numel(p)
        if p.requires_grad:
            trainable += n
        else:
            frozen += n
    return trainable, frozen


def summary_rows(model, max_depth: int = 1) -> list[tuple[str, str, int, int]]:
    """(name, type, trainable, frozen) of each submodule down to ``max_depth`` levels, in order."""
    rows = []
    for name, module in model.named_modules():
        depth = name.count(".") + 1 if name else 0
        if 0 < depth <= max_depth:
            rows.append((name, type(module).__name__, *_count(module.parameters())))
    return rows


class ModelSummary:
    """Logs a table of the model's submodules (down to ``max_depth``) with their trainable and
    frozen parameters, the totals, and the fp32 size, on rank 0 at fit start; ``max_depth: 0``
    logs the totals only. ``trainer.enable_model_summary`` adds it (true) or removes it (false)."""

    def __init__(self, max_depth: int = 1):
        if max_depth < 0:
            raise ValueError(f"callbacks.model_summary.max_depth: must be >= 0, got {max_depth}")
        self.max_depth = max_depth

    def on_fit_start(self, trainer) -> None:
        if not trainer.is_global_zero:
            return
        model = trainer.unwrapped_model
        rows = summary_rows(model, self.max_depth)
        trainable, frozen = _count(model.parameters())
        width = max([len(r[0]) for r in rows] + [len("total")])
        lines = [f"  {'name':<{width}}  {'type':<20} {'trainable':>12} {'frozen':>12}"]
        lines += [f"  {n:<{width}}  {t:<20} {a:>12,} {f:>12,}" for n, t, a, f in rows]
        lines.append(
            f"  {'total':<{width}}  {type(model).__name__:<20} {trainable:>12,} {frozen:>12,}"
            f"   ({(trainable + frozen) * 4 / 2**20:.2f} MiB in fp32)"
        )
        stage = getattr(model, "pipeline_stage_units", None)
        if stage:  # a pipeline's rank 0 holds its first stage only
            lines.append(f"  (rank 0's pipeline stage: {', '.join(stage)}; the other ranks hold the other stages)")
        log.info("Model summary:\n%s", "\n".join(lines))
