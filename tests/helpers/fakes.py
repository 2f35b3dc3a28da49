"""The engine's unit layer: a Trainer built by hand around a fake in-process strategy, tiny data and a
tiny task (no Hydra, no process group: each test runs in milliseconds)."""

from __future__ import annotations

import contextlib
from functools import partial

import torch
from torch.utils.data import DataLoader, TensorDataset

from framework.config.schemas import StrategyConfig, TrainerConfig
from framework.engine.trainer import Trainer
from framework.models import GPT
from framework.strategies import Strategy


class FakeStrategy(Strategy):
    """One process on the CPU that records what the engine asked of it."""

    name = "fake"

    def __init__(self, lockstep_forward: bool = False):
        super().__init__(StrategyConfig(), "cpu")
        self.lockstep_forward = lockstep_forward
        self.calls: list[str] = []
        self.parallelized_dtypes: list[torch.dtype] = []

    def parallelize(self, model):
        self.calls.append("parallelize")
        self.parallelized_dtypes = sorted({p.dtype for p in model.parameters()}, key=str)
        return model

    @contextlib.contextmanager
    def no_sync(self, model):
        self.calls.append("no_sync")
        yield

    def optimizer_step(self, model, optimizer, precision, clip_val, clip_algorithm) -> None:
        self.calls.append("optimizer_step")
        super().optimizer_step(model, optimizer, precision, clip_val, clip_algorithm)


class TinyData:
    """``n`` samples of 4 features (a linear target) in train and val, global batch ``batch``."""

    def __init__(self, n: int = 16, batch: int = 4, val: int = 10):
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(n + val, 4, generator=generator)
        y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0])
        self.train_set, self.val_set = TensorDataset(x[:n], y[:n]), TensorDataset(x[n:], y[n:])
        self.batch = batch

    def setup(self, stage: str) -> None:
        pass

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch)

    def test_dataloader(self):
        return self.val_dataloader()


class TinyTask:
    """Mean squared error; ``nan_from_step``: the training loss is NaN from that optimizer step on."""

    def __init__(self, nan_from_step: int | None = None):
        self.nan_from_step, self.train_steps = nan_from_step, 0

    def step(self, model, batch, stage):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        if stage == "train":
            self.train_steps += 1
            if self.nan_from_step is not None and self.train_steps >= self.nan_from_step:
                loss = loss * float("nan")
        return loss, {"abs_error": (model(x).squeeze(-1) - y).abs().mean()}


EVENT_NAMES = (
    "on_fit_start",
    "on_train_epoch_start",
    "on_train_batch_end",
    "on_train_step_end",
    "on_validation_start",
    "on_validation_end",
    "on_train_epoch_end",
    "on_fit_end",
    "on_test_start",
    "on_test_end",
    "on_exception",
)


class AllHooks:
    """Every hook of the Callback contract, recorded in order."""

    def __init__(self):
        self.events: list[str] = []
        for event in EVENT_NAMES:
            setattr(self, event, partial(self._record, event))

    def _record(self, event: str, trainer, *args) -> None:
        self.events.append(event)


def unit_trainer(strategy: Strategy | None = None, task=None, callbacks=(), signals=None, **config) -> Trainer:
    """A Trainer over ``strategy`` (a FakeStrategy by default) with ``config`` on top of a quiet base."""
    base = dict(max_epochs=1, log_every_n_steps=1, num_sanity_val_steps=0, enable_progress_bar=False)
    torch.manual_seed(0)
    return Trainer(
        TrainerConfig(**{**base, **config}),
        strategy or FakeStrategy(),
        task or TinyTask(),
        callbacks=callbacks,
        seed=0,
        signals=signals,
    )


def fit(trainer: Trainer, data: TinyData | None = None, lr: float = 0.01) -> Trainer:
    torch.manual_seed(0)
    trainer.fit(torch.nn.Linear(4, 1), data or TinyData(), partial(torch.optim.SGD, lr=lr))
    return trainer


class GPTCallingRemovedModules(GPT):
    """A GPT that declares itself splittable but whose forward calls every module, also those a
    pipeline stage removed: what the pipeline's check before start must catch."""

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for block in self.layers.values():
            h = block(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))
