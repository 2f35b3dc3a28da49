"""``framework-predict ckpt_path=<run dir>/checkpoints/<name> [group=option ...] [key=value ...]``

Predicts with a checkpoint's weights and the config its run saved, as framework.evaluate
tests them: the task's ``predict_step`` (or the model) over the datamodule's
``predict_dataloader()`` (the built-in datamodules: the test split; ``datamodule=...`` and
its keys choose other data), on any strategy (``strategy=ddp trainer.devices=2``). Rank 0
writes the predictions in dataset order to ``<run dir>/predict/<date>_<time>/predictions.pt``
(``predict_format=csv``: predictions.csv); ``trainer.limit_predict_batches`` predicts a prefix.
"""

from __future__ import annotations

from framework.cli.evaluate import main as _main


def main() -> None:
    _main(mode="predict", usage=__doc__)
