"""Metric loggers: ``log_metrics(metrics, step)``, ``log_hparams(params, metrics)``, ``finalize(status)``
(a plug-in layer). May import: engine and every layer below it."""

from framework.loggers.csv_logger import CSVLogger
from framework.loggers.mlflow_logger import MLFlowLogger
from framework.loggers.tensorboard import TensorBoardLogger
from framework.loggers.wandb_logger import WandbLogger

__all__ = ["CSVLogger", "MLFlowLogger", "TensorBoardLogger", "WandbLogger"]
