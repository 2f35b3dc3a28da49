"""Shared helpers: shrunk configs that train in well under a second."""
from __future__ import annotations

import pytest

from framework import compose

# A tiny MLP on digits, two short epochs, no progress bar: the base of most tests.
TINY = [
    "experiment=digits_mlp",
    "model.hidden_sizes=[32]",
    "trainer.max_epochs=2",
    "trainer.limit_train_batches=6",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "datamodule.batch_size=32",
]


@pytest.fixture
def tiny_cfg():
    def make(*overrides: str):
        return compose(TINY + list(overrides))

    return make

