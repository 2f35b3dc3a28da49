"""Validation every N training batches, against the batches an epoch has: N counts the batches of
one epoch, so an N above them never validates (and whatever monitors val/ never sees a value)."""

from __future__ import annotations

from typing import Any, Optional


def validation_interval_problem(interval: Any, epoch_batches: int, bound: str = "") -> Optional[str]:
    """The problem of ``trainer.val_check_interval`` = ``interval`` (an int: batches) for epochs of
    ``epoch_batches`` batches (``bound``: where that number comes from), or None."""
    if isinstance(interval, bool) or not isinstance(interval, int) or interval <= epoch_batches:
        return None
    return (
        f"trainer.val_check_interval: every {interval} training batches, but an epoch has {epoch_batches}"
        f"{bound}: validation would never run; use at most {epoch_batches}, a fraction of the epoch "
        "(e.g. 0.5), or trainer.limit_val_batches=0 to skip validation"
    )
