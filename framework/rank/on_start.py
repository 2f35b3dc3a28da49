"""What runs on the weights training starts from (a fine-tune's base), once the strategy set the model
up, before the first step: callbacks that ``rank/build.py`` adds when the run asks for them, whose
results the stages after training put beside the trained weights' (``harness.on_start``,
``predict_on_start``). A resumed run starts from trained weights: they do nothing then. The random
states are kept: training draws what it would have drawn without them."""

from __future__ import annotations

from types import SimpleNamespace

from framework.config.schemas import HarnessConfig
from framework.engine.seed import random_states_kept


class ScoresOnStart:
    """``harness.on_start``: the harness's scores (rank/harness.py), logged as ``harness_start/...``."""

    def __init__(self, settings: HarnessConfig, output_dir: str):
        self.settings, self.output_dir, self.scores = settings, output_dir, None

    def on_fit_start(self, trainer) -> None:
        from framework.rank.harness import score  # (here: lm-eval loads only when asked for)

        if trainer.global_step != 0:
            return
        parts = SimpleNamespace(model=None, datamodule=trainer.datamodule, task=trainer.task)
        with random_states_kept():
            self.scores = score(self.settings, trainer, parts, None, self.output_dir, prefix="harness_start")


class PredictionsOnStart:
    """``predict_on_start``: the predict loop's outputs (rank 0's, in dataset order)."""

    def __init__(self):
        self.predictions = None

    def on_fit_start(self, trainer) -> None:
        if trainer.global_step != 0:
            return
        with random_states_kept():
            self.predictions = trainer.predict(trainer.datamodule)


def beside(rows: list[dict], before: list[dict]) -> list[dict]:
    """predictions.jsonl's rows with what the weights training started from gave for each prompt
    (``<key>_on_start``) beside what the trained ones gave."""
    return [{**row, **{f"{k}_on_start": v for k, v in old.items() if k != "prompt"}} for row, old in zip(rows, before)]
