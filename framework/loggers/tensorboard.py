"""TensorBoard event files: scalars as they are logged, hparams with the final metrics."""
from __future__ import annotations

from pathlib import Path

from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams


class TensorBoardLogger:
    def __init__(self, save_dir: str):
        self.save_dir = Path(save_dir)
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

    def log_hparams(self, params: dict, metrics: dict[str, float]) -> None:
        """``params``: flat {dotted.key: value}; shown in TensorBoard's HPARAMS tab with ``metrics``."""
        clean = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in params.items()}
        # Written into this writer's own event file (add_hparams would open a second run dir).
        # The metric curves already exist under the same tags, which the HPARAMS tab links to.
        for summary in hparams(clean, metrics):
            self.writer.file_writer.add_summary(summary)

    def finalize(self, status: str) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()
            self._writer = None
