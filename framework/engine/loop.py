"""The training engine: one fit / validate / test loop for every strategy.

The strategy is injected; the loop never asks which one it has. It reads the loss from
the device only at logging steps (``log_every_n_steps``), so it adds no host sync to a step.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import asdict, replace
from typing import Callable, Mapping, Optional, Sequence

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from framework.config.schemas import TrainerConfig
from framework.data.batched import collate_for
from framework.engine.loop_state import LoopState
from framework.engine.memory import model_state_bytes
from framework.engine.precision import Precision
from framework.engine.protocols import EVENTS
from framework.engine.scheduler import SchedulerSpec
from framework.strategies.base import Strategy

log = logging.getLogger(__name__)


def effective_config(config: TrainerConfig) -> TrainerConfig:
    """``config`` with the debugging shortcuts (fast_dev_run, overfit_batches) spelled out."""
    if config.fast_dev_run:
        # Lightning's meaning: N batches of each loop, one epoch, nothing written by loggers.
        n = 1 if config.fast_dev_run is True else int(config.fast_dev_run)
        config = replace(config, max_epochs=1, max_steps=n, limit_train_batches=n, limit_val_batches=n,
                         limit_test_batches=n, limit_predict_batches=n, val_check_interval=1.0,
                         check_val_every_n_epoch=1, log_every_n_steps=1)
    if config.overfit_batches:
        config = replace(config, limit_train_batches=config.overfit_batches)
    return config


def _unlimited(value: Optional[int]) -> bool:
    return value is None or value == -1


def limit_batches(total: int, limit: int | float) -> int:
    """Lightning's limit_*_batches: a float is a fraction of ``total``, an int a count."""
    if isinstance(limit, float):
        return total if limit == 1.0 else int(total * limit)
    return min(total, limit)


def batch_size_of(batch) -> int:
    while isinstance(batch, (list, tuple)):
        batch = batch[0]
    if isinstance(batch, dict):
        return batch_size_of(next(iter(batch.values())))
    return batch.shape[0]


def move_to_device(batch, device: torch.device, dtype: Optional[torch.dtype] = None):
    """``batch``'s tensors on ``device``; its floating ones in ``dtype`` when given (*-true precision)."""
    if isinstance(batch, torch.Tensor):
        if dtype is not None and batch.is_floating_point():
            return batch.to(device, dtype, non_blocking=True)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(b, device, dtype) for b in batch)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device, dtype) for k, v in batch.items()}
    return batch


class Trainer:
    """Runs fit and test on this rank.

    What callbacks read: ``state`` (a LoopState: ``global_step``, ``current_epoch``, ...; the
    first two also as attributes), ``should_stop`` (set it to stop at the next step
    boundary; every rank agrees), ``logged_metrics`` (latest value of every metric),
    ``model``, ``optimizer``, ``scheduler``, ``strategy``, ``loggers``, ``config``,
    ``num_training_batches``, ``planned_steps()``, ``global_batch_size``, ``step_times``,
    ``train_samples`` and ``current_batch`` (the training batch being run, on the strategy's device).
    """

    def __init__(self, config: TrainerConfig, strategy: Strategy, task, loggers=(),
                 callbacks: Mapping[str, object] | Sequence[object] = (), seed: int = 0):
        self.config = config = effective_config(config)
        self.strategy, self.task, self.seed = strategy, task, seed
        self.precision = Precision(config.precision, strategy.device)
        self.loggers = list(loggers) if strategy.is_global_zero and not config.fast_dev_run else []
        self._set_callbacks(callbacks)
        self._null = contextlib.nullcontext()
        # The task's epoch-level metrics (tasks/metrics.py EpochMetrics), when it declares any.
        self.epoch_metrics = getattr(task, "epoch_metrics", None) or None
        if self.epoch_metrics is not None:
            self.epoch_metrics.to(strategy.device)
        self._move = strategy.device.type != "cpu" or self.precision.input_dtype is not None
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scheduler, self.scheduler_spec = None, None
        self.state = LoopState()
        self.should_stop = False
        self.current_batch = None
        self._datamodule = None
        self.num_training_batches = self.global_batch_size = self.micro_batch_global_size = 0
        self.logged_metrics: dict[str, float] = {}
        self.step_times: list[float] = []  # seconds per optimizer step, data loading included
        self.train_samples = 0
        self.model_state_bytes: Optional[dict] = None  # params + grads + optimizer state on this rank
        self._eval_names: dict[str, list[str]] = {}
        self._t_prev = 0.0
        # The training losses since the last finiteness check, kept on the device: one list append
        # per step (no kernel, no host sync); the check sums them, and NaN/inf propagate into the sum.
        self._unchecked_losses: list[torch.Tensor] = []
        self._checked_step = 0
        self.diverged: Optional[dict] = None  # {"after_step", "by_step"} once a non-finite loss was seen
        self.signals = None  # a StopSignals (engine/signals.py) whose signal stops the run at a step boundary
        self.interrupted: Optional[int] = None  # the signal number every rank stopped on
        self._signal_vote = None
        self._stop_requested = False  # request_stop(): goes to every rank with the next stop vote
        self._told_minimum = False
        # Seeded per epoch: a resumed run's DataLoader draws the same worker seeds, and the
        # loader never consumes the global RNG that dropout and friends use.
        self._loader_generator = torch.Generator()

    def _set_callbacks(self, callbacks: Mapping[str, object] | Sequence[object]) -> None:
        # Callback state in checkpoints is keyed by the callback's config name (or its own
        # state_key), so removing one callback never hands its state to another.
        named = callbacks.items() if isinstance(callbacks, Mapping) else \
            [(type(cb).__qualname__, cb) for cb in callbacks]
        self.callbacks = [cb for _, cb in named]
        self._state_keys = [getattr(cb, "state_key", None) or name for name, cb in named]
        self._hooks = {e: [getattr(cb, e) for cb in self.callbacks if callable(getattr(cb, e, None))]
                       for e in EVENTS}
        # Callbacks that run evaluation on other weights (EMA, SWA): contexts around each pass's forwards.
        self._evaluation_weights = [cb.evaluation_weights for cb in self.callbacks
                                    if callable(getattr(cb, "evaluation_weights", None))]
        # ... and those that keep tensors laid out like the model's (saved through DCP with it).
        self._sharded_keys = [key for key, cb in zip(self._state_keys, self.callbacks)
                              if callable(getattr(cb, "sharded_state_dict", None))]

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def global_step(self) -> int:
        return self.state.global_step

    @property
    def current_epoch(self) -> int:
        return self.state.current_epoch

    # ---------------------------------------------------------------- public loops
    def fit(self, model: torch.nn.Module, datamodule, optimizer_factory: Callable,
            scheduler: Optional[SchedulerSpec] = None, ckpt_path: Optional[str] = None) -> None:
        """Train ``model`` on ``datamodule``; the strategy wraps it and builds the optimizer.

        ``ckpt_path``: a checkpoint directory to resume from (model, optimizer, scheduler,
        scaler, epoch, step, position in the epoch, RNG states, callbacks)."""
        datamodule.setup("fit")
        self._datamodule = datamodule
        if self.config.reload_dataloaders_every_n_epochs:
            datamodule.trainer = self  # Lightning's idiom: its *_dataloader() may read trainer.current_epoch
        if self.config.activation_checkpointing:
            from framework.engine.activation_checkpointing import apply_activation_checkpointing

            names = apply_activation_checkpointing(model, self.config.activation_checkpointing)
            if self.is_global_zero:
                log.info("Activation checkpointing: %d submodules recompute in backward (%s)", len(names),
                         ", ".join(names[:8]) + (", ..." if len(names) > 8 else ""))
        if self.config.compile:
            model.compile()  # in place: parameter names (and so checkpoints) stay the same
        self.model, self.optimizer = self.strategy.setup(self.precision.convert_module(model), optimizer_factory)
        train_loader = self._loader(datamodule.train_dataloader(), train=True)
        val_loader = None
        if self.config.limit_val_batches != 0:
            val_loader = self._loader(datamodule.val_dataloader(), train=False)
        self.num_training_batches = limit_batches(len(train_loader), self.config.limit_train_batches)
        if scheduler is not None:
            self.scheduler = scheduler.build(self.optimizer, self._scheduler_intervals(scheduler.interval))
            self.scheduler_spec = scheduler
        if ckpt_path is not None:
            from framework.engine.checkpoint import load_checkpoint

            load_checkpoint(ckpt_path, self)
            log.info("Resumed from %s at epoch %d, step %d", ckpt_path, self.current_epoch, self.global_step)
            for logger in self.loggers:
                if callable(getattr(logger, "resume", None)):
                    logger.resume(self.global_step)
        elif val_loader is not None and self.config.num_sanity_val_steps:
            self._run_guarded(lambda: self._evaluate(val_loader, "val", sanity=True))
        self._run_guarded(lambda: self._fit_loop(train_loader, val_loader))

    def test(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None) -> dict[str, float]:
        """Run the test loop on the trained model, or on ``model`` (set up by the strategy); with
        the weights of the checkpoint ``ckpt_path`` when given."""
        datamodule.setup("test")
        self._model_for("test", model, ckpt_path)
        loader = self._loader(datamodule.test_dataloader(), train=False)
        return self._run_guarded(lambda: self._evaluate(loader, "test"))

    def predict(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None):
        """The outputs of ``task.predict_step(model, batch)`` (without one: ``model(inputs)``) for
        every sample of ``datamodule.predict_dataloader()`` (up to ``limit_predict_batches``), in
        dataset order, on rank 0 (None on the other ranks). Model and weights as for ``test``."""
        datamodule.setup("predict")
        self._model_for("predict", model, ckpt_path)
        loader = self._loader(datamodule.predict_dataloader(), train=False)
        if loader is None:
            raise ValueError("datamodule: predict_dataloader() returned None; there is nothing to predict")
        return self._run_guarded(lambda: self._predict(loader))

    def _model_for(self, stage: str, model: Optional[torch.nn.Module], ckpt_path) -> None:
        """The model a test or predict pass runs: the trained one, or ``model`` set up by the
        strategy; with the weights of the checkpoint ``ckpt_path`` when given."""
        if model is not None:
            self.model, _ = self.strategy.setup(self.precision.convert_module(model), None)
        if self.model is None:
            raise RuntimeError(f"no model: call fit() first or pass model= to {stage}()")
        if ckpt_path is not None:
            from framework.engine.checkpoint import load_model_checkpoint

            load_model_checkpoint(ckpt_path, self)
            log.info("%s with the weights of %s", "Testing" if stage == "test" else "Predicting", ckpt_path)

    # ---------------------------------------------------------------- checkpoint state
    def sharded_callback_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The tensors of callbacks that keep some laid out like the model (EMA, SWA), by state key:
        saved and loaded (in place) through torch.distributed.checkpoint with the model."""
        return {key: cb.sharded_state_dict(self) for key, cb in zip(self._state_keys, self.callbacks)
                if key in self._sharded_keys}

    def state_dict(self) -> dict:
        """The loop's state for a checkpoint (model and optimizer are saved by the strategy)."""
        return {
            "sharded_callbacks": list(self._sharded_keys),
            "loop": asdict(self.state), "logged_metrics": dict(self.logged_metrics),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.precision.scaler.state_dict() if self.precision.scaler is not None else None,
            "callbacks": {key: cb.state_dict() for key, cb in zip(self._state_keys, self.callbacks)
                          if callable(getattr(cb, "state_dict", None))},
        }

    def load_state_dict(self, state: dict) -> None:
        self.state = LoopState(**state["loop"])
        self.logged_metrics.update(state["logged_metrics"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.precision.scaler is not None and state.get("scaler") is not None:
            self.precision.scaler.load_state_dict(state["scaler"])
        saved = self.load_callback_states(state.get("callbacks", {}))
        if saved and self.is_global_zero:
            log.warning("The checkpoint holds state of callbacks that are not configured now: %s "
                        "(configured: %s); that state is not used", ", ".join(sorted(saved)),
                        ", ".join(self._state_keys) or "none")

    def load_callback_states(self, states: dict, only: Optional[Sequence[str]] = None) -> dict:
        """Give each callback (of the keys ``only``, when given) its saved state; returns the
        states no configured callback took."""
        saved = dict(states)
        for key, cb in zip(self._state_keys, self.callbacks):
            if key in saved and (only is None or key in only) and callable(getattr(cb, "load_state_dict", None)):
                cb.load_state_dict(saved.pop(key))
        return saved

    # ---------------------------------------------------------------- the fit loop
    def _fit_loop(self, train_loader: DataLoader, val_loader: Optional[DataLoader]) -> None:
        st = self.state
        self._call("on_fit_start")
        while True:
            st.advance_if_finished()  # resumed from (or just finished) an epoch's end
            if not self._should_train():
                break
            train_loader, val_loader = self._reloaded(train_loader, val_loader)
            self._train_epoch(train_loader, val_loader)
            self._end_epoch(val_loader)
        if self._signal_vote is not None:  # the last step's vote: complete it, its result is not needed
            self._signal_vote[0].wait()
            self._signal_vote = None
        self.strategy.end_training(self.model)
        # A run cut short by max_steps still reports validation metrics of its final weights.
        if val_loader is not None and st.last_val_step != st.global_step and st.global_step > 0 \
                and self.interrupted is None:
            self._evaluate(val_loader, "val")
        self._call("on_fit_end")

    def _reloaded(self, train: DataLoader, val: Optional[DataLoader]) -> tuple[DataLoader, Optional[DataLoader]]:
        """``reload_dataloaders_every_n_epochs``: the datamodule's loaders anew at the start of every
        N-th epoch (not mid-epoch, where a resumed run continues the loader it started with)."""
        n, st = self.config.reload_dataloaders_every_n_epochs, self.state
        if not n or st.current_epoch == 0 or st.current_epoch % n or st.batch_in_epoch:
            return train, val
        train = self._loader(self._datamodule.train_dataloader(), train=True)
        self.num_training_batches = limit_batches(len(train), self.config.limit_train_batches)
        return train, (self._loader(self._datamodule.val_dataloader(), train=False) if val is not None else None)

    def _should_train(self) -> bool:
        cfg, st = self.config, self.state
        return (self.num_training_batches > 0 and not self._stopping()
                and (_unlimited(cfg.max_epochs) or st.current_epoch < cfg.max_epochs)
                and not self._max_steps_reached())

    def _max_steps_reached(self) -> bool:
        return not _unlimited(self.config.max_steps) and self.state.global_step >= self.config.max_steps

    def _stopping(self) -> bool:
        """``should_stop``, once ``min_epochs`` and ``min_steps`` are reached (as Lightning's: early
        stopping waits for them); a stop signal, divergence or ``max_steps`` stops regardless."""
        if not self.should_stop:
            return False
        if self.interrupted is not None or self.diverged is not None or self._max_steps_reached():
            return True
        cfg, st = self.config, self.state
        epochs_done = st.current_epoch + (st.batch_in_epoch >= self.num_training_batches)
        waiting = (cfg.min_epochs or 0) > epochs_done or (cfg.min_steps or 0) > st.global_step
        if waiting and not self._told_minimum and self.is_global_zero:
            log.info("A stop was requested at step %d; training goes on to min_epochs=%s / min_steps=%s",
                     st.global_step, cfg.min_epochs, cfg.min_steps)
        self._told_minimum = self._told_minimum or waiting
        return not waiting

    def request_stop(self) -> None:
        """Stop every rank after the same step, on one rank's decision (its clock, say): the
        request travels with the next step's stop vote (a stop signal's), not through should_stop."""
        self._stop_requested = True

    def _train_epoch(self, loader: DataLoader, val_loader: Optional[DataLoader]) -> None:
        """The epoch's remaining batches, one optimizer step (accumulation window) at a time,
        with mid-epoch validation every ``val_check_interval`` batches."""
        st, n, accum = self.state, self.num_training_batches, self.config.accumulate_grad_batches
        loader.sampler.set_epoch(st.current_epoch)
        # Resuming mid-epoch: the sampler starts after the batches already trained on.
        loader.sampler.set_start(min(st.batch_in_epoch, n) * loader.batch_size)
        self._loader_generator.manual_seed(self.seed + st.current_epoch)
        self.model.train()
        if self.epoch_metrics is not None and not st.batch_in_epoch:
            self.epoch_metrics.reset("train")
        self._call("on_train_epoch_start")
        batches, val_every = iter(loader), self._val_every(n)
        self._t_prev = time.perf_counter()
        while st.batch_in_epoch < n and not self._stopping():
            first = st.batch_in_epoch
            self._train_step(batches, min(accum, n - first))
            if self._validates_this_epoch(val_loader) and st.batch_in_epoch // val_every > first // val_every \
                    and st.batch_in_epoch < n:
                self._evaluate(val_loader, "val")
                self._sync_should_stop()
                self._t_prev = time.perf_counter()
            if self._max_steps_reached():
                self.should_stop = True

    def _train_step(self, batches, size: int) -> None:
        """One optimizer step: ``size`` micro-batches forward and backward, then the strategy's step."""
        st, strategy, model, precision = self.state, self.strategy, self.model, self.precision
        accum, step_loss = self.config.accumulate_grad_batches, None
        for i in range(size):
            batch = next(batches)
            self.current_batch = batch = self._on_device(batch)
            # Only the last micro-batch of an accumulation window all-reduces gradients.
            with (self._null if i == size - 1 else strategy.no_sync(model)):
                with precision.autocast():
                    loss, metrics = self.task.step(model, batch, "train")
                precision.backward(loss / accum if accum > 1 else loss)
            loss = loss.detach()
            step_loss = loss if step_loss is None else step_loss + loss
            st.batch_in_epoch += 1
            if i < size - 1:
                self._call("on_train_batch_end", loss, st.batch_in_epoch - 1)
        self._optimizer_step()
        st.global_step += 1
        now = time.perf_counter()
        self.step_times.append(now - self._t_prev)
        self._t_prev = now
        self.train_samples += size * self.micro_batch_global_size
        spec = self.scheduler_spec
        if spec is not None and spec.interval == "step" and st.global_step % spec.frequency == 0:
            self.scheduler.step()
        if self.config.detect_nonfinite:
            self._unchecked_losses.append(step_loss)
        if st.global_step % self.config.log_every_n_steps == 0:
            self._log_train(step_loss, size, metrics)
            self.check_finite()
        if self.signals is not None or (self._stop_requested and not self.strategy.distributed):
            self._agree_on_stop()
        self._call("on_train_batch_end", loss, st.batch_in_epoch - 1)
        if self._hooks["on_train_step_end"]:
            self._call("on_train_step_end", step_loss / size if size > 1 else step_loss)

    def _optimizer_step(self) -> None:
        cfg = self.config
        self.strategy.optimizer_step(self.model, self.optimizer, self.precision, cfg.gradient_clip_val,
                                     cfg.gradient_clip_algorithm)
        if self.model_state_bytes is None:  # once, while gradients and optimizer state both exist
            self.model_state_bytes = model_state_bytes(self.strategy.unwrap(self.model), self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)

    def _end_epoch(self, val_loader: Optional[DataLoader]) -> None:
        """Validation, the epoch-interval scheduler step and the callbacks, once the epoch's
        batches are all run (a stopped epoch only gets its callbacks)."""
        st, n, cfg = self.state, self.num_training_batches, self.config
        finished = st.batch_in_epoch >= n
        if finished and self._validates_this_epoch(val_loader) and st.last_val_step != st.global_step \
                and (isinstance(cfg.val_check_interval, float) or n % self._val_every(n) == 0):
            self._evaluate(val_loader, "val")
        spec = self.scheduler_spec
        if finished and spec is not None and spec.interval == "epoch" and (st.current_epoch + 1) % spec.frequency == 0:
            self.scheduler.step()
        if finished and self.epoch_metrics is not None and self.epoch_metrics.tracks("train"):
            self.log_metrics({f"train/{k}": v for k, v in self.epoch_metrics.compute("train").items()})
        st.epoch_finished = finished
        self.check_finite()
        self._call("on_train_epoch_end")
        self._sync_should_stop()

    def _agree_on_stop(self) -> None:
        """Stop once any rank received a stop signal or a ``request_stop``. Each step sends this
        rank's flags and reads the flags all ranks sent one step earlier: every rank reads the same
        values at the same step, and no step waits for the reduction it starts."""
        received = [float(self.signals.received or 0) if self.signals is not None else 0.0,
                    float(self._stop_requested)]
        agreed = received
        if self.strategy.distributed:
            agreed = [0.0, 0.0]
            if self._signal_vote is not None:
                work, vote = self._signal_vote
                work.wait()
                agreed = vote.tolist()
            vote = torch.tensor(received, device=self.strategy.device)
            self._signal_vote = (self.strategy.all_reduce_async(vote, "max"), vote)
        if agreed[0]:
            self.should_stop, self.interrupted = True, int(agreed[0])
        elif agreed[1]:
            self.should_stop = True

    def check_finite(self) -> bool:
        """False once a training loss was NaN or infinite; then the run stops (status "diverged").
        Collective: every rank calls it at the same point (log steps, epoch ends, checkpoint saves)."""
        if self.diverged is not None or not self._unchecked_losses:
            return self.diverged is None
        bad = torch.isfinite(torch.stack(self._unchecked_losses).sum()).logical_not().float().reshape(1)
        if self.strategy.all_reduce(bad, "max").item():
            self.diverged = {"after_step": self._checked_step, "by_step": self.global_step}
            self.should_stop = True
            if self.is_global_zero:
                log.error("The training loss became NaN or infinite between steps %d and %d: stopping; no "
                          "checkpoint is saved from now on", self._checked_step + 1, self.global_step)
        else:
            self._unchecked_losses, self._checked_step = [], self.global_step
        return self.diverged is None

    def _validates_this_epoch(self, val_loader: Optional[DataLoader]) -> bool:
        return val_loader is not None and (self.state.current_epoch + 1) % self.config.check_val_every_n_epoch == 0

    def _val_every(self, n: int) -> int:
        interval = self.config.val_check_interval
        if isinstance(interval, float):
            return max(1, int(n * interval)) if interval < 1.0 else max(1, n)
        return max(1, interval)

    def _sync_should_stop(self) -> None:
        # A stop decided on any rank stops every rank at the same step.
        if self.strategy.distributed:
            flag = torch.tensor(float(self.should_stop), device=self.strategy.device)
            self.should_stop = bool(self.strategy.all_reduce(flag, "max").item())

    # ---------------------------------------------------------------- events and logging
    def _call(self, event: str, *args) -> None:
        for hook in self._hooks[event]:
            hook(self, *args)

    def _run_guarded(self, body: Callable):
        try:
            return body()
        except BaseException as err:
            self._call("on_exception", err)
            raise

    def _log_train(self, step_loss: torch.Tensor, micro: int, metrics: dict) -> None:
        # The only place a training step's loss leaves the device: every log_every_n_steps.
        values = [step_loss / micro] + [m.detach().float() for m in metrics.values()]
        reduced = self.strategy.all_reduce(torch.stack(values).float(), "mean").tolist()
        out = {"train/loss": reduced[0], **{f"train/{k}": v for k, v in zip(metrics, reduced[1:])}}
        self.log_metrics(out)

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        """Record ``metrics`` (floats) at ``step`` (default: the current optimizer step) in every logger."""
        self.logged_metrics.update(metrics)
        if self.loggers:
            row = {**metrics, "epoch": self.current_epoch}
            for logger in self.loggers:
                logger.log_metrics(row, self.global_step if step is None else step)

    # ---------------------------------------------------------------- data
    def _on_device(self, batch):
        """The batch on the strategy's device, its floating tensors in a *-true precision's dtype."""
        return move_to_device(batch, self.strategy.device, self.precision.input_dtype) if self._move else batch

    def _loader(self, loader: Optional[DataLoader], train: bool) -> Optional[DataLoader]:
        """Re-create ``loader`` with the per-rank batch and the strategy's sampler."""
        if loader is None:
            return None
        if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
            raise ValueError("datamodule: the engine shards map-style datasets with a batch_size; "
                             "an IterableDataset or a custom batch_sampler cannot be split across ranks")
        global_batch = loader.batch_size
        world = self.strategy.topology.data_parallel_size
        if global_batch % world:
            raise ValueError(f"datamodule.batch_size: the global batch {global_batch} does not divide "
                             f"across {world} data-parallel ranks")
        length = len(loader.dataset)
        if train:
            if length < global_batch:
                raise ValueError(f"datamodule.batch_size: the global batch {global_batch} is larger than the "
                                 f"training set ({length} samples)")
            self.global_batch_size = global_batch * self.config.accumulate_grad_batches
            self.micro_batch_global_size = global_batch
        shuffle = train and isinstance(loader.sampler, RandomSampler) and not self.config.overfit_batches
        # Training drops the tail that does not fill a global batch: every rank then runs
        # the same number of equal steps, and 1 rank and N ranks see the same batches.
        sampler = self.strategy.sampler(length, shuffle, self.seed, global_batch if train else None)
        return DataLoader(loader.dataset, batch_size=global_batch // world, sampler=sampler,
                          num_workers=loader.num_workers, collate_fn=collate_for(loader.collate_fn),
                          pin_memory=self.strategy.device.type == "cuda", drop_last=False,
                          persistent_workers=loader.persistent_workers, worker_init_fn=loader.worker_init_fn,
                          timeout=loader.timeout, generator=self._loader_generator)

    def planned_steps(self) -> Optional[int]:
        """The optimizer steps this run trains for at most: ``max_steps``, or ``max_epochs`` of
        them, whichever ends first (None: neither limits the run)."""
        epochs, steps = self.config.max_epochs, self.config.max_steps
        limits = [] if _unlimited(epochs) else [epochs * self._steps_per_epoch()]
        if not _unlimited(steps):
            limits.append(steps)
        return min(limits) if limits else None

    def _steps_per_epoch(self) -> int:
        return math.ceil(self.num_training_batches / self.config.accumulate_grad_batches)

    def _scheduler_intervals(self, interval: str) -> int:
        """How many times the scheduler will step in this run (for T_max / total_steps = null)."""
        epochs = self.config.max_epochs
        if interval == "epoch":
            if _unlimited(epochs):
                return max(1, math.ceil(self.config.max_steps / max(1, self._steps_per_epoch())))
            return max(1, epochs)
        return max(1, self.planned_steps() or 1)

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def _evaluate(self, loader: Optional[DataLoader], stage: str, sanity: bool = False) -> dict[str, float]:
        """Mean loss and metrics over ``loader`` on all ranks, weighted by sample counts.
        ``sanity``: the pre-training check; its results are neither logged nor shown to callbacks."""
        if loader is None:
            return {}
        limit = limit_batches(len(loader), getattr(self.config, f"limit_{stage}_batches"))
        if sanity and self.config.num_sanity_val_steps >= 0:
            limit = min(limit, self.config.num_sanity_val_steps)
        was_training = self.model.training
        self.model.eval()
        if not sanity:
            self._call("on_validation_start" if stage == "val" else "on_test_start")
        with self._weights_for(stage):
            totals, count = self._evaluate_batches(loader, stage, limit)
        names = self._eval_names.get(stage, ["loss"])
        if totals is None:  # this rank had no batch; it still joins the reduction
            totals = torch.zeros(len(names), device=self.strategy.device)
        packed = torch.cat([totals, torch.tensor([float(count)], device=totals.device)])
        # Sums of (value x samples) and of samples: the mean equals single-device's exactly.
        summed = self.strategy.all_reduce(packed, "sum").tolist()
        results = {f"{stage}/{name}": summed[i] / summed[-1] for i, name in enumerate(names)} if summed[-1] else {}
        results.update(self._epoch_metric_values(stage, sanity or not summed[-1]))
        self.model.train(was_training)
        if sanity:
            return results
        if stage == "val":
            self.state.last_val_step = self.global_step
        self.log_metrics(results)
        self._call("on_validation_end" if stage == "val" else "on_test_end", results)
        return results

    @torch.no_grad()
    def _predict(self, loader: DataLoader):
        """Every rank's outputs over its first ``limit_predict_batches`` batches, on rank 0 in order."""
        from framework.engine.predictions import concat_outputs, interleave

        limit = limit_batches(len(loader), self.config.limit_predict_batches)
        batches = self._lockstep_batches(limit)
        was_training, outputs = self.model.training, []
        self.model.eval()
        with self._weights_for("predict"):
            for i, batch in enumerate(loader):
                if i >= limit:
                    break
                outputs.append(self._predict_step(self._on_device(batch)))
            for _ in range(batches - limit):  # lockstep forwards on a stand-in sample, results discarded
                self._predict_step(self._stand_in_batch(loader))
        self.model.train(was_training)
        parts = self.strategy.gather_object(concat_outputs(outputs))
        return interleave(parts) if self.is_global_zero else None

    def _predict_step(self, batch):
        with self.precision.autocast():
            step = getattr(self.task, "predict_step", None)
            if step is not None:
                return step(self.model, batch)
            return self.model(batch[0] if isinstance(batch, (list, tuple)) else batch)

    def _weights_for(self, stage: str) -> contextlib.ExitStack:
        """The weights callbacks choose for a ``stage`` pass ("val", "test", "predict") swapped in."""
        stack = contextlib.ExitStack()
        for weights in self._evaluation_weights:
            stack.enter_context(weights(self, stage))
        return stack

    def _epoch_metric_values(self, stage: str, discard: bool) -> dict[str, float]:
        """The task's epoch metrics of this pass, gathered over ranks; ``discard``: reset them
        instead (the sanity check, a pass without samples). Every rank calls it."""
        metrics = self.epoch_metrics
        if metrics is None or not metrics.tracks(stage):
            return {}
        if discard:
            metrics.reset(stage)
            return {}
        return {f"{stage}/{name}": value for name, value in metrics.compute(stage).items()}

    def _evaluate_batches(self, loader: DataLoader, stage: str, limit: int):
        """(sums of value x batch size, sample count) over this rank's first ``limit`` batches."""
        batches = self._lockstep_batches(limit)
        totals, count, batch = None, 0, None
        for i, raw in enumerate(loader):
            if i >= limit:
                break
            batch = self._on_device(raw)  # (the last one run stands in for the lockstep forwards)
            with self.precision.autocast():
                loss, metrics = self.task.step(self.model, batch, stage)
            size = batch_size_of(batch)
            self._eval_names.setdefault(stage, ["loss", *metrics])
            values = torch.stack([loss.float(), *(m.float() for m in metrics.values())]) * size
            totals = values if totals is None else totals + values
            count += size
        self._pad_forwards(loader, stage, batches - min(limit, len(loader)), batch)
        return totals, count

    def _lockstep_batches(self, limit: int) -> int:
        """The forwards this rank runs in a pass over its ``limit`` batches. Sharded parameters are
        gathered inside forward, a collective: a rank with fewer batches repeats forwards (results
        discarded) until every rank is done. Agreed before the first forward, so no rank is in
        another collective meanwhile."""
        if not self.strategy.lockstep_forward:
            return limit
        return int(self.strategy.all_reduce(torch.tensor(limit, device=self.strategy.device), "max").item())

    def _stand_in_batch(self, loader: DataLoader):
        """The dataset's first sample as a batch on the device, for forwards whose results are discarded."""
        return self._on_device(loader.collate_fn([loader.dataset[0]]))

    def _pad_forwards(self, loader: DataLoader, stage: str, repeats: int, batch) -> None:
        """``repeats`` extra forwards whose results are discarded (lockstep with the busiest rank)."""
        if batch is None and len(loader.dataset) and (repeats or stage not in self._eval_names):
            # This rank got no sample (fewer samples than ranks). The dataset's first sample
            # stands in, never counted: for the lockstep forwards, and for the metric names,
            # which every rank needs to reduce the same vector.
            batch = self._stand_in_batch(loader)
            repeats = max(repeats, 1)
        for _ in range(repeats):
            with self.precision.autocast(), (self.epoch_metrics.paused() if self.epoch_metrics else self._null):
                _, metrics = self.task.step(self.model, batch, stage)
            self._eval_names.setdefault(stage, ["loss", *metrics])
