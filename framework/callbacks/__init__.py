"""Callbacks: plain objects with optional ``on_<event>(trainer, ...)`` methods (a plug-in layer).

The hooks, when each runs and what it receives: ``framework.engine.protocols.Callback``; what
they read of the trainer: ``TrainerView``. May import: engine and every layer below it.
"""

from framework.callbacks.checkpoint import ModelCheckpoint
from framework.callbacks.device_stats import DeviceStats
from framework.callbacks.early_stopping import EarlyStopping
from framework.callbacks.ema import EMA
from framework.callbacks.finetuning import BackboneFinetuning
from framework.callbacks.lr_monitor import LearningRateMonitor
from framework.callbacks.model_summary import ModelSummary
from framework.callbacks.progress import ProgressBar
from framework.callbacks.swa import SWA
from framework.callbacks.throughput import Throughput
from framework.callbacks.timer import Timer

__all__ = [
    "BackboneFinetuning",
    "DeviceStats",
    "EMA",
    "EarlyStopping",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "SWA",
    "Throughput",
    "Timer",
]
