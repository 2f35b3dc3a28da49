"""The moment a later attempt in a run's directory takes the top record: when it trains."""

from __future__ import annotations

from pathlib import Path

from framework.engine.attempts import promote


class AttemptRecord:
    """A callback (added by rank/build.py for a later attempt): at the start of the fit loop, once
    the checkpoint loaded, rank 0 makes this attempt's config the run's (engine/attempts.py).
    Anything that fails before that point leaves the run's record as it was."""

    def __init__(self, run_dir: str, attempt: int):
        self.run_dir, self.attempt = Path(run_dir), attempt

    def on_fit_start(self, trainer) -> None:
        if trainer.is_global_zero:
            promote(self.run_dir, self.attempt)
