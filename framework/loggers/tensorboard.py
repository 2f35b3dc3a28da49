"""TensorBoard event files: scalars as they are logged, hparams with the final metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

# What every run's row of the HPARAMS tab shows, after the keys the job's command line set.
LAYOUT_HPARAMS = ("strategy.name", "trainer.devices", "trainer.num_nodes", "trainer.precision")


class TensorBoardLogger:
    """``hparams``: more config keys (dotted) for the HPARAMS tab, beside the keys the job's command
    line set (a sweep's swept keys, read from the run's .hydra/overrides.yaml) and the layout."""

    def __init__(self, save_dir: str, hparams: Optional[Sequence[str]] = None):
        self.save_dir = Path(save_dir)
        self.hparams = list(hparams or [])
        self._writer: SummaryWriter | None = None

    @property
    def writer(self) -> SummaryWriter:
        # Created on first use, so a run that logs nothing leaves no empty event file.
        if self._writer is None:
            self._writer = SummaryWriter(log_dir=str(self.save_dir))
        return self._writer

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)

    def shown_keys(self, params: dict) -> list[str]:
        """The keys of the HPARAMS tab, in its order: the command line's, the layout, the user's."""
        overrides = self.save_dir.parent / ".hydra" / "overrides.yaml"
        given = [str(o).lstrip("+~").split("=", 1)[0] for o in OmegaConf.load(overrides)] if overrides.is_file() else []
        # a group selection (strategy=ddp, model=mlp) shows as the node's name or class
        given = [
            k if k in params else next((f"{k}.{n}" for n in ("name", "_target_") if f"{k}.{n}" in params), k)
            for k in given
            if not k.startswith("hydra")
        ]
        return [k for k in dict.fromkeys([*given, *LAYOUT_HPARAMS, *self.hparams]) if k in params]

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        """``params``: flat {dotted.key: value}; the HPARAMS tab shows ``shown_keys`` of them with
        ``metrics`` (hundreds of flattened keys would bury the few that differ between runs). A run
        that scored nothing (a prediction) writes no row, and so no event file."""
        if not metrics:
            return
        clean = {
            k: (v if isinstance(v, (int, float, str, bool)) else str(v))
            for k, v in ((key, params[key]) for key in self.shown_keys(params))
        }
        # Written into this writer's own event file (add_hparams would open a second run dir).
        # The metric curves already exist under the same tags, which the HPARAMS tab links to.
        for summary in hparams(clean, metrics):
            self.writer.file_writer.add_summary(summary)

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
