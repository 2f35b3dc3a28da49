"""The training engine: one fit / validate / test loop for every strategy.

The strategy is injected; the loop never asks which one it has. It reads the loss from
the device only at logging steps (``log_every_n_steps``), so it adds no host sync to a step.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import replace
from typing import Callable, Optional

import torch
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from framework.callbacks import EVENTS
from framework.config.schemas import TrainerConfig
from framework.engine.memory import model_state_bytes
from framework.engine.precision import Precision
from framework.engine.scheduler import SchedulerSpec
from framework.strategies.base import Strategy

log = logging.getLogger(__name__)


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


def move_to_device(batch, device: torch.device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(move_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: move_to_device(v, device) for k, v in batch.items()}
    return batch


class Trainer:
    """Runs fit / validate / test on this rank.

    State that callbacks read: ``global_step`` (optimizer steps), ``current_epoch``,
    ``should_stop`` (set it to stop after the current batch), ``logged_metrics``
    (latest value of every metric), ``model``, ``optimizer``, ``strategy``, ``loggers``.
    """

    def __init__(self, config: TrainerConfig, strategy: Strategy, task, loggers=(), callbacks=(), seed: int = 0,
                 output_dir: str = "."):
        if config.fast_dev_run:
            # Lightning's meaning: N batches of each loop, one epoch, nothing written by loggers.
            n = 1 if config.fast_dev_run is True else int(config.fast_dev_run)
            config = replace(config, max_epochs=1, max_steps=n, limit_train_batches=n, limit_val_batches=n,
                             limit_test_batches=n, val_check_interval=1.0, check_val_every_n_epoch=1,
                             log_every_n_steps=1)
            loggers = ()
        if config.overfit_batches:
            config = replace(config, limit_train_batches=config.overfit_batches)
        self.config = config
        self.strategy = strategy
        self.task = task
        self.seed = seed
        self.precision = Precision(config.precision, strategy.device)
        self.loggers = list(loggers) if strategy.is_global_zero else []
        self.callbacks = list(callbacks)
        self.output_dir = output_dir
        if config.profiler:
            from framework.callbacks.profiler import PROFILERS

            self.callbacks.append(PROFILERS[config.profiler](output_dir))
        self._hooks = {e: [getattr(cb, e) for cb in self.callbacks if callable(getattr(cb, e, None))]
                       for e in EVENTS}
        self._null = contextlib.nullcontext()
        self._move = strategy.device.type != "cpu"
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scheduler = None
        self.global_step = 0
        self.current_epoch = 0
        self.epochs_run = 0
        self.should_stop = False
        self.step_completed = False
        self.batch_in_epoch = 0      # training batches of the current epoch already run
        self.current_batch = None    # the batch being trained on (for callbacks)
        self.at_epoch_end = False    # inside the epoch-end validation / callbacks
        self.epoch_finished = False  # the current epoch's end-of-epoch work is done
        self.num_training_batches = 0
        self.global_batch_size = 0
        self.micro_batch_global_size = 0
        self.logged_metrics: dict[str, float] = {}
        self.step_times: list[float] = []  # seconds per optimizer step, data loading included
        self.train_samples = 0
        self.model_state_bytes: Optional[dict] = None  # params + grads + optimizer state on this rank
        self._eval_names: dict[str, list[str]] = {}
        self._last_val_step = -1
        # Seeded per epoch: a resumed run's DataLoader draws the same worker seeds, and the
        # loader never consumes the global RNG that dropout and friends use.
        self._loader_generator = torch.Generator()

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    # ---------------------------------------------------------------- public loops
    def fit(self, model: torch.nn.Module, datamodule, optimizer_factory: Callable,
            scheduler: Optional[SchedulerSpec] = None, ckpt_path: Optional[str] = None) -> None:
        """Train ``model`` on ``datamodule``; the strategy wraps it and builds the optimizer.

        ``ckpt_path``: a checkpoint directory to resume from (model, optimizer, scheduler,
        scaler, epoch, step, position in the epoch, RNG states, callbacks)."""
        datamodule.setup("fit")
        if self.config.compile:
            model.compile()  # in place: parameter names (and so checkpoints) stay the same
        self.model, self.optimizer = self.strategy.setup(model, optimizer_factory)
        train_loader = self._loader(datamodule.train_dataloader(), train=True)
        val_loader = None
        if self.config.limit_val_batches != 0:
            val_loader = self._loader(datamodule.val_dataloader(), train=False)
        self.num_training_batches = limit_batches(len(train_loader), self.config.limit_train_batches)
        if scheduler is not None:
            self.scheduler = scheduler.build(self.optimizer, self._scheduler_intervals(scheduler.interval))
            self._scheduler_spec = scheduler
        if ckpt_path is not None:
            from framework.engine.checkpoint import load_checkpoint

            load_checkpoint(ckpt_path, self)
            log.info("Resumed from %s at epoch %d, step %d", ckpt_path, self.current_epoch, self.global_step)
        elif val_loader is not None and self.config.num_sanity_val_steps:
            self._run_guarded(lambda: self._evaluate(val_loader, "val", sanity=True))
        self._run_guarded(lambda: self._fit_loop(train_loader, val_loader))

    def validate(self, datamodule) -> dict[str, float]:
        datamodule.setup("validate")
        self._require_model()
        loader = self._loader(datamodule.val_dataloader(), train=False)
        return self._run_guarded(lambda: self._evaluate(loader, "val"))

    def test(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None) -> dict[str, float]:
        """Run the test loop on the trained model, or on ``model`` (set up by the strategy, with
        the weights of the checkpoint ``ckpt_path`` when given)."""
        datamodule.setup("test")
        if model is not None:
            self.model, _ = self.strategy.setup(model, None)
            if ckpt_path is not None:
                from framework.engine.checkpoint import load_model_checkpoint

                load_model_checkpoint(ckpt_path, self)
                log.info("Testing the weights of %s", ckpt_path)
        self._require_model()
        loader = self._loader(datamodule.test_dataloader(), train=False)
        return self._run_guarded(lambda: self._evaluate(loader, "test"))

    # ---------------------------------------------------------------- internals
    def _require_model(self) -> None:
        if self.model is None:
            raise RuntimeError("no model: call fit() first or pass model= to test()")

    def state_dict(self) -> dict:
        """The loop's state for a checkpoint (model and optimizer are saved by the strategy)."""
        return {
            "global_step": self.global_step, "current_epoch": self.current_epoch,
            "batch_in_epoch": self.batch_in_epoch, "epoch_finished": self.epoch_finished,
            "epochs_run": self.epochs_run, "logged_metrics": dict(self.logged_metrics),
            "last_val_step": self._last_val_step,
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.precision.scaler.state_dict() if self.precision.scaler is not None else None,
            "callbacks": {self._callback_key(i, cb): cb.state_dict() for i, cb in enumerate(self.callbacks)
                          if callable(getattr(cb, "state_dict", None))},
        }

    def load_state_dict(self, state: dict) -> None:
        self.global_step, self.current_epoch = state["global_step"], state["current_epoch"]
        self.batch_in_epoch, self.epoch_finished = state["batch_in_epoch"], state["epoch_finished"]
        self.epochs_run, self._last_val_step = state["epochs_run"], state["last_val_step"]
        self.logged_metrics.update(state["logged_metrics"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        if self.precision.scaler is not None and state.get("scaler") is not None:
            self.precision.scaler.load_state_dict(state["scaler"])
        saved = state.get("callbacks", {})
        for i, cb in enumerate(self.callbacks):
            key = self._callback_key(i, cb)
            if key in saved and callable(getattr(cb, "load_state_dict", None)):
                cb.load_state_dict(saved[key])

    @staticmethod
    def _callback_key(index: int, callback) -> str:
        return f"{index}:{type(callback).__qualname__}"

    def _sync_should_stop(self) -> None:
        # A stop decided on any rank stops every rank at the same step.
        if self.strategy.distributed:
            flag = torch.tensor(float(self.should_stop), device=self.strategy.device)
            self.should_stop = bool(self.strategy.all_reduce(flag, "max").item())

    def _call(self, event: str, *args) -> None:
        for hook in self._hooks[event]:
            hook(self, *args)

    def _run_guarded(self, body: Callable):
        try:
            return body()
        except BaseException as err:
            self._call("on_exception", err)
            raise

    def _loader(self, loader: Optional[DataLoader], train: bool) -> Optional[DataLoader]:
        """Re-create ``loader`` with the per-rank batch and the strategy's sampler."""
        if loader is None:
            return None
        if isinstance(loader.dataset, IterableDataset) or loader.batch_size is None:
            raise ValueError("datamodule: the engine shards map-style datasets with a batch_size; "
                             "an IterableDataset or a custom batch_sampler cannot be split across ranks")
        global_batch = loader.batch_size
        world = self.strategy.data_parallel_world()
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
                          num_workers=loader.num_workers, collate_fn=loader.collate_fn,
                          pin_memory=self.strategy.device.type == "cuda", drop_last=False,
                          persistent_workers=loader.persistent_workers, worker_init_fn=loader.worker_init_fn,
                          timeout=loader.timeout, generator=self._loader_generator)

    def _scheduler_intervals(self, interval: str) -> int:
        """How many times the scheduler will step in this run (for T_max / total_steps = null)."""
        epochs = self.config.max_epochs
        steps_per_epoch = math.ceil(self.num_training_batches / self.config.accumulate_grad_batches)
        if interval == "epoch":
            if _unlimited(epochs):
                return max(1, math.ceil(self.config.max_steps / max(1, steps_per_epoch)))
            return max(1, epochs)
        total = math.inf if _unlimited(epochs) else epochs * steps_per_epoch
        if not _unlimited(self.config.max_steps):
            total = min(total, self.config.max_steps)
        return max(1, int(total))

    def _val_every(self, n: int) -> int:
        interval = self.config.val_check_interval
        if isinstance(interval, float):
            return max(1, int(n * interval)) if interval < 1.0 else max(1, n)
        return max(1, interval)

    def _fit_loop(self, train_loader: DataLoader, val_loader: Optional[DataLoader]) -> None:
        cfg = self.config
        model, optimizer, strategy, precision, task = self.model, self.optimizer, self.strategy, self.precision, self.task
        accum, n = cfg.accumulate_grad_batches, self.num_training_batches
        max_steps = None if _unlimited(cfg.max_steps) else cfg.max_steps
        max_epochs = None if _unlimited(cfg.max_epochs) else cfg.max_epochs
        val_every = self._val_every(n)
        step_scheduler = self.scheduler if (self.scheduler and self._scheduler_spec.interval == "step") else None
        epoch_scheduler = self.scheduler if (self.scheduler and self._scheduler_spec.interval == "epoch") else None
        frequency = self._scheduler_spec.frequency if self.scheduler else 1
        log_every, batch_end_hooks = cfg.log_every_n_steps, self._hooks["on_train_batch_end"]
        self._call("on_fit_start")
        epoch, skip = self.current_epoch, self.batch_in_epoch
        if self.epoch_finished:  # resumed from a checkpoint taken after its epoch's end
            epoch, skip = epoch + 1, 0
        sampler = train_loader.sampler
        per_rank_batch = train_loader.batch_size
        while n > 0 and not self.should_stop and (max_epochs is None or epoch < max_epochs) \
                and (max_steps is None or self.global_step < max_steps):
            self.current_epoch = epoch
            self.epoch_finished = False
            sampler.set_epoch(epoch)
            # Resuming mid-epoch: the sampler starts after the batches already trained on.
            sampler.set_start(min(skip, n) * per_rank_batch)
            self._loader_generator.manual_seed(self.seed + epoch)
            model.train()
            validate_this_epoch = val_loader is not None and (epoch + 1) % cfg.check_val_every_n_epoch == 0
            self._call("on_train_epoch_start")
            micro, step_loss, step_metrics = 0, None, None
            t_prev = time.perf_counter()
            for batch_idx, batch in enumerate(train_loader, start=min(skip, n)):
                if batch_idx >= n:
                    break
                self.batch_in_epoch = batch_idx + 1
                self.current_batch = batch
                if self._move:
                    batch = move_to_device(batch, strategy.device)
                micro += 1
                last_micro = micro == accum or batch_idx + 1 == n
                # Only the last micro-batch of an accumulation window all-reduces gradients.
                with (self._null if last_micro else strategy.no_sync(model)):
                    with precision.autocast():
                        loss, step_metrics = task.step(model, batch, "train")
                    precision.backward(loss / accum if accum > 1 else loss)
                loss = loss.detach()
                step_loss = loss if step_loss is None else step_loss + loss
                self.step_completed = last_micro
                if last_micro:
                    self._optimizer_step(model, optimizer)
                    self.global_step += 1
                    now = time.perf_counter()
                    self.step_times.append(now - t_prev)
                    t_prev = now
                    self.train_samples += micro * self.micro_batch_global_size
                    if step_scheduler is not None and self.global_step % frequency == 0:
                        step_scheduler.step()
                    if self.global_step % log_every == 0:
                        self._log_train(step_loss, micro, step_metrics)
                    micro, step_loss = 0, None
                for hook in batch_end_hooks:
                    hook(self, loss, batch_idx)
                if validate_this_epoch and (batch_idx + 1) % val_every == 0 and batch_idx + 1 < n:
                    self._evaluate(val_loader, "val")
                    self._sync_should_stop()
                    t_prev = time.perf_counter()
                if max_steps is not None and self.global_step >= max_steps:
                    self.should_stop = True
                if self.should_stop:
                    break
            skip = 0
            self.epochs_run = epoch + 1
            self.at_epoch_end = True
            if validate_this_epoch and (isinstance(cfg.val_check_interval, float) or n % val_every == 0) \
                    and self._last_val_step != self.global_step and self.batch_in_epoch >= n:
                self._evaluate(val_loader, "val")
            if epoch_scheduler is not None and (epoch + 1) % frequency == 0 and self.batch_in_epoch >= n:
                epoch_scheduler.step()
            self.epoch_finished = self.batch_in_epoch >= n
            self._call("on_train_epoch_end")
            self._sync_should_stop()
            self.at_epoch_end = False
            if self.epoch_finished:
                self.batch_in_epoch = 0
            epoch += 1
        self.current_epoch = epoch
        # A run cut short by max_steps still reports validation metrics of its final weights.
        if val_loader is not None and self._last_val_step != self.global_step and self.global_step > 0:
            self._evaluate(val_loader, "val")
        self._call("on_fit_end")

    def _optimizer_step(self, model, optimizer) -> None:
        clip = self.config.gradient_clip_val
        if clip:
            self.precision.unscale(optimizer)
            self.strategy.clip_gradients(model, clip, self.config.gradient_clip_algorithm)
        self.precision.step(optimizer)
        if self.model_state_bytes is None:  # once, while gradients and optimizer state both exist
            self.model_state_bytes = model_state_bytes(self.strategy.unwrap(model), optimizer)
        optimizer.zero_grad(set_to_none=True)

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

    @torch.no_grad()
    def _evaluate(self, loader: Optional[DataLoader], stage: str, sanity: bool = False) -> dict[str, float]:
        """Mean loss and metrics over ``loader`` on all ranks, weighted by sample counts.
        ``sanity``: the pre-training check; its results are neither logged nor shown to callbacks."""
        if loader is None:
            return {}
        limit = limit_batches(len(loader), getattr(self.config, f"limit_{stage}_batches"))
        if sanity and self.config.num_sanity_val_steps >= 0:
            limit = min(limit, self.config.num_sanity_val_steps)
        model = self.model
        was_training = model.training
        model.eval()
        if not sanity:
            self._call("on_validation_start" if stage == "val" else "on_test_start")
        totals, count = None, 0
        batches = limit
        if self.strategy.lockstep_forward:
            # Sharded parameters are gathered inside forward, a collective: a rank with fewer
            # batches repeats its last batch (results discarded) until every rank is done.
            batches = int(self.strategy.all_reduce(torch.tensor(limit, device=self.strategy.device), "max").item())
        batch = None
        for i, batch in enumerate(loader):
            if i >= limit:
                break
            if self._move:
                batch = move_to_device(batch, self.strategy.device)
            with self.precision.autocast():
                loss, metrics = self.task.step(model, batch, stage)
            size = batch_size_of(batch)
            self._eval_names.setdefault(stage, ["loss", *metrics])
            values = torch.stack([loss.float(), *(m.float() for m in metrics.values())]) * size
            totals = values if totals is None else totals + values
            count += size
        repeats = batches - min(limit, len(loader))
        if batch is None and len(loader.dataset) and (repeats or stage not in self._eval_names):
            # This rank got no sample (fewer samples than ranks). The dataset's first sample
            # stands in, never counted: for the lockstep forwards, and for the metric names,
            # which every rank needs to reduce the same vector.
            batch = loader.collate_fn([loader.dataset[0]])
            batch = move_to_device(batch, self.strategy.device) if self._move else batch
            repeats = max(repeats, 1)
        for _ in range(repeats):
            with self.precision.autocast():
                _, metrics = self.task.step(model, batch, stage)
            self._eval_names.setdefault(stage, ["loss", *metrics])
        names = self._eval_names.get(stage, ["loss"])
        if totals is None:  # this rank had no batch; it still joins the reduction
            totals = torch.zeros(len(names), device=self.strategy.device)
        packed = torch.cat([totals, torch.tensor([float(count)], device=totals.device)])
        # Sums of (value x samples) and of samples: the mean equals single-device's exactly.
        summed = self.strategy.all_reduce(packed, "sum").tolist()
        results = {f"{stage}/{name}": summed[i] / summed[-1] for i, name in enumerate(names)} if summed[-1] else {}
        model.train(was_training)
        if sanity:
            return results
        if stage == "val":
            self._last_val_step = self.global_step
        self.log_metrics(results)
        self._call("on_validation_end" if stage == "val" else "on_test_end", results)
        return results
