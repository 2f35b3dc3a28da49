"""Callbacks: plain objects with optional ``on_<event>(trainer, ...)`` methods.

Events, in order: on_fit_start, on_train_epoch_start, on_train_batch_end(loss, batch_idx),
on_validation_start, on_validation_end(metrics), on_train_epoch_end, on_fit_end,
on_test_start, on_test_end(metrics), on_exception(error). ``loss`` is the batch's detached
loss tensor; ``metrics`` a dict of floats. The engine calls only the methods that exist.
"""
from framework.callbacks.checkpoint import ModelCheckpoint
from framework.callbacks.early_stopping import EarlyStopping
from framework.callbacks.finetuning import BackboneFinetuning
from framework.callbacks.lr_monitor import LearningRateMonitor
from framework.callbacks.progress import ProgressBar
from framework.callbacks.throughput import Throughput

EVENTS = ("on_fit_start", "on_train_epoch_start", "on_train_batch_end", "on_validation_start",
          "on_validation_end", "on_train_epoch_end", "on_fit_end", "on_test_start", "on_test_end",
          "on_exception")

__all__ = ["EVENTS", "BackboneFinetuning", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint", "ProgressBar",
           "Throughput"]
