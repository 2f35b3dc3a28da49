"""SWA: stochastic weight averaging, the equal-weight average of the weights at epoch ends."""

from __future__ import annotations

import logging
from typing import Union

from torch.optim.swa_utils import get_swa_multi_avg_fn

from framework.callbacks.weight_average import AveragedWeights, AveragingCallback

log = logging.getLogger(__name__)


class SWA(AveragingCallback):
    """Averages the weights at the end of every training epoch from ``swa_epoch_start`` on (an
    int: that epoch, 0-based; a float: that fraction of ``trainer.max_epochs``, Lightning's
    meaning), BatchNorm statistics included. When training ends the model takes the average, so
    the test, ``model.pt`` and what follows use it; testing a checkpoint taken after the start
    uses that checkpoint's average. Validation during training sees the trained weights. The
    learning-rate schedule is the run's own (choose a constant or cyclic one for SWA)."""

    @classmethod
    def check_config(cls, swa_epoch_start: Union[int, float] = 0.8, **_) -> list[str]:
        bad = (
            isinstance(swa_epoch_start, float)
            and not 0.0 <= swa_epoch_start <= 1.0
            or isinstance(swa_epoch_start, (int, float))
            and swa_epoch_start < 0
        )
        return [f"swa_epoch_start: {swa_epoch_start} is not an epoch >= 0 or a fraction in [0, 1]"] if bad else []

    def __init__(self, swa_epoch_start: Union[int, float] = 0.8):
        problems = self.check_config(swa_epoch_start)
        if problems:
            raise ValueError(f"callbacks.swa.{problems[0]}")
        self.swa_epoch_start = swa_epoch_start
        self.average = AveragedWeights(get_swa_multi_avg_fn())
        self.applied = False  # the model holds the average (after fit)

    def _start_epoch(self, trainer) -> int:
        if isinstance(self.swa_epoch_start, int):
            return self.swa_epoch_start
        max_epochs = trainer.config.max_epochs
        if max_epochs is None or max_epochs < 1:
            raise ValueError("callbacks.swa.swa_epoch_start: a fraction needs trainer.max_epochs; give an epoch")
        return int(self.swa_epoch_start * max_epochs)

    def on_fit_start(self, trainer) -> None:
        self.average.tensors_for(trainer)  # allocated now: a checkpoint saves them from the first save on
        self.applied = False

    def on_train_epoch_end(self, trainer) -> None:
        if trainer.state.epoch_finished and trainer.current_epoch >= self._start_epoch(trainer):
            self.average.update(trainer)

    def on_fit_end(self, trainer) -> None:
        if not self.average.num_averaged:
            if trainer.is_global_zero:
                log.warning(
                    "SWA: training ended before epoch %d; the model keeps its trained weights",
                    self._start_epoch(trainer),
                )
            return
        self.average.swap(trainer)
        self.applied = True
        if trainer.is_global_zero:
            log.info("SWA: the model now holds the average of %d epochs' weights", self.average.num_averaged)

    def uses_average(self, stage: str) -> bool:
        return stage != "val" and not self.applied  # after fit the model holds the average already

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.applied = False
