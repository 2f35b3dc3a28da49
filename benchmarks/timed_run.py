"""The overrides every timed benchmark run shares: one epoch of training steps and nothing else
(no validation, test, predictions, loggers, callbacks or progress bar) to time."""

TIMED_RUN = [
    "trainer.limit_val_batches=0",
    "test=false",
    "predict=false",
    "logger=none",
    "callbacks=none",
    "trainer.enable_progress_bar=false",
    "trainer.max_epochs=1",
]
