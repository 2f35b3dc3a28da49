"""The training engine: one fit / validate / test / predict loop for every strategy.

The Trainer holds the loop and its state; its parts do one job each: ``TrainingStep`` (forward,
backward and the optimizer step of one accumulation window), ``EvaluationPasses`` (validation,
test and predict, in lockstep across ranks), ``Stopping`` (every reason to stop and the vote),
``CallbackList`` (hooks, checkpointed callback state) and ``RankLoaders`` (this rank's loaders).
``prepare_model`` states the order in which the model is made ready. The strategy is injected;
the loop never asks which one it has. It reads the loss from the device only at logging steps
(``log_every_n_steps``), so it adds no host sync to a step.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Callable, Mapping, Optional, Sequence

import torch
from torch.utils.data import DataLoader

from framework.config.errors import ConfigError
from framework.config.intervals import validation_interval_problem
from framework.config.schemas import TrainerConfig
from framework.engine.callback_list import CallbackList
from framework.engine.data_loaders import RankLoaders, limit_batches
from framework.engine.evaluation import EvaluationPasses
from framework.engine.precision import Precision
from framework.engine.prepare_model import prepare_model
from framework.engine.rollout_steps import RolloutSteps
from framework.engine.scheduler import SchedulerSpec
from framework.engine.stopping import Stopping, unlimited
from framework.engine.training_step import TrainingStep
from framework.strategies.base import Strategy
from framework.strategies.comm.collectives import all_reduce

log = logging.getLogger(__name__)


def effective_config(config: TrainerConfig) -> TrainerConfig:
    """``config`` with the debugging shortcuts (fast_dev_run, overfit_batches) spelled out."""
    if config.fast_dev_run:
        # Lightning's meaning: N batches of each loop, one epoch, nothing written by loggers.
        n = 1 if config.fast_dev_run is True else int(config.fast_dev_run)
        config = replace(
            config,
            max_epochs=1,
            max_steps=n,
            limit_train_batches=n,
            limit_val_batches=n,
            limit_test_batches=n,
            limit_predict_batches=n,
            val_check_interval=1.0,
            check_val_every_n_epoch=1,
            log_every_n_steps=1,
        )
    if config.overfit_batches:
        config = replace(config, limit_train_batches=config.overfit_batches)
    return config


@dataclass
class LoopState:
    """The fit loop's progress: exactly what a checkpoint saves of it, nothing derived. Between
    epochs it reads ``(epoch e, 0 batches, not finished)``; a checkpoint taken in an epoch's end
    callbacks reads ``(e, all batches, finished)`` and resumes at epoch e+1 without redoing the
    end of epoch e (validation, scheduler step)."""

    global_step: int = 0  # optimizer steps taken
    current_epoch: int = 0  # the epoch being trained, or the next one between epochs
    batch_in_epoch: int = 0  # training batches of current_epoch already run (the resume point)
    epoch_finished: bool = False  # current_epoch's end-of-epoch work is done
    last_val_step: int = -1  # global_step of the latest validation (-1: none yet)

    def advance_if_finished(self) -> None:
        """Move past a finished epoch: the next one starts at its first batch."""
        if self.epoch_finished:
            self.current_epoch, self.batch_in_epoch, self.epoch_finished = self.current_epoch + 1, 0, False

    @property
    def epochs_run(self) -> int:
        """Epochs trained in, the current one counted once it has a batch."""
        return self.current_epoch + (1 if self.batch_in_epoch > 0 or self.epoch_finished else 0)


class Trainer:
    """Runs fit, validate, test and predict on this rank. What callbacks may read and set is the
    ``TrainerView`` protocol (engine/protocols.py); ``signals``: a StopSignals whose first signal
    stops the run at a step boundary, with a ``last`` checkpoint (None: signals are not watched);
    ``trust_checkpoint``: load checkpoints whose files are more than data (engine/safe_load.py)."""

    def __init__(
        self,
        config: TrainerConfig,
        strategy: Strategy,
        task,
        loggers=(),
        callbacks: Mapping[str, object] | Sequence[object] = (),
        seed: int = 0,
        signals=None,
        trust_checkpoint: bool = False,
    ):
        self.config = config = effective_config(config)
        self.strategy, self.task, self.seed = strategy, task, seed
        self.trust_checkpoint = trust_checkpoint  # load checkpoints that are more than data (safe_load.py)
        self.precision = Precision(config.precision, strategy.device)
        self.loggers = list(loggers) if strategy.is_global_zero and not config.fast_dev_run else []
        self.callbacks = CallbackList(callbacks)
        # The task's epoch-level metrics (tasks/metrics.py EpochMetrics), when it declares any.
        self.epoch_metrics = getattr(task, "epoch_metrics", None) or None
        if self.epoch_metrics is not None:
            self.epoch_metrics.to(strategy.device)
        self.loaders = RankLoaders(
            strategy, seed, config.accumulate_grad_batches, bool(config.overfit_batches), self.precision.input_dtype
        )
        self.stopping = Stopping(config, strategy.device, signals, strategy.is_global_zero)
        self.training_step = TrainingStep(task, strategy, self.precision, config, self.loaders.on_device)
        self.evaluation = EvaluationPasses(task, strategy, self.precision, config, self.loaders, self.epoch_metrics)
        self.model: Optional[torch.nn.Module] = None
        self.optimizer: Optional[torch.optim.Optimizer] = None
        self.scheduler, self.scheduler_spec = None, None
        self.state = LoopState()
        self.datamodule = None
        self.num_training_batches = 0
        self.logged_metrics: dict[str, float] = {}
        self.step_times: list[float] = []  # seconds per optimizer step, data loading included
        self.train_samples = 0
        self._t_prev = 0.0

    # ---------------------------------------------------------------- what callbacks read
    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def rank(self) -> int:
        return self.strategy.rank

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def device(self) -> torch.device:
        return self.strategy.device

    @property
    def global_step(self) -> int:
        return self.state.global_step

    @property
    def current_epoch(self) -> int:
        return self.state.current_epoch

    @property
    def unwrapped_model(self) -> Optional[torch.nn.Module]:
        """The user's model inside the strategy's wrapper (parameter names as the model's own)."""
        return None if self.model is None else self.strategy.unwrap(self.model)

    @property
    def inner_optimizer(self):
        """The optimizer of the configured class inside the strategy's (ZeRO's shard optimizer)."""
        return None if self.optimizer is None else self.strategy.inner_optimizer(self.optimizer)

    @property
    def global_batch_size(self) -> int:
        return self.loaders.global_batch_size

    @property
    def current_batch(self):
        return self.training_step.current_batch

    @property
    def model_state_bytes(self) -> Optional[dict]:
        return self.training_step.model_state_bytes

    @property
    def should_stop(self) -> bool:
        return self.stopping.requested

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self.stopping.requested = bool(value)

    @property
    def interrupted(self) -> Optional[int]:
        return self.stopping.signal

    @property
    def diverged(self) -> Optional[dict]:
        return self.stopping.diverged

    def request_stop(self) -> None:
        """Stop every rank after the same step, on one rank's decision: the request travels with
        the next step's stop vote (a stop signal's), not through should_stop."""
        self.stopping.request_stop()

    def check_finite(self) -> bool:
        """False once a training loss was NaN or infinite (collective: every rank calls it together)."""
        return self.stopping.check_finite(self.global_step)

    # ---------------------------------------------------------------- public loops
    def fit(
        self,
        model: torch.nn.Module,
        datamodule,
        optimizer_factory: Callable,
        scheduler: Optional[SchedulerSpec] = None,
        ckpt_path: Optional[str] = None,
    ) -> None:
        """Train ``model`` on ``datamodule``; the strategy wraps it and builds the optimizer.

        ``ckpt_path``: a checkpoint directory to resume from (model, optimizer, scheduler,
        scaler, epoch, step, position in the epoch, RNG states, callbacks)."""
        datamodule.setup("fit")
        self.datamodule = datamodule
        self._sample_rollouts()
        self._count_targets(datamodule)
        if self.config.reload_dataloaders_every_n_epochs:
            datamodule.trainer = self  # Lightning's idiom: its *_dataloader() may read trainer.current_epoch
        self.model, self.optimizer = prepare_model(model, self.config, self.precision, self.strategy, optimizer_factory)
        if ckpt_path is not None:  # the data's record first: a datamodule may pin what the resumed epoch reads
            self._restore_datamodule(ckpt_path)
        train_loader = self.loaders.make(datamodule.train_dataloader(), train=True)
        val_loader = None
        if self.config.limit_val_batches != 0:
            val_loader = self.loaders.make(datamodule.val_dataloader(), train=False)
        self.num_training_batches = limit_batches(len(train_loader), self.config.limit_train_batches)
        problem = validation_interval_problem(
            self.config.val_check_interval, self.num_training_batches, " (the epoch as the data loads it)"
        )
        if problem and val_loader is not None and not self.config.fast_dev_run:
            raise ConfigError([problem])  # the epoch's length is the data's: known only now, before the first step
        self._warn_if_nothing_logged()
        if scheduler is not None:
            self.scheduler = scheduler.build(self.optimizer, self._scheduler_intervals(scheduler.interval))
            self.scheduler_spec = scheduler
        if ckpt_path is not None:
            self._resume(ckpt_path)
        elif val_loader is not None and self.config.val_on_start:  # (logged at step 0: the weights before training)
            self._run_guarded(lambda: self.evaluation.evaluate(self, val_loader, "val"))
        elif val_loader is not None and self.config.num_sanity_val_steps:
            self._run_guarded(lambda: self.evaluation.evaluate(self, val_loader, "val", sanity=True))
        self._run_guarded(lambda: self._fit_loop(train_loader, val_loader))

    def _count_targets(self, datamodule) -> None:
        """A datamodule that masks a varying number of targets, or a task that samples its training batches
        (task=grpo's answers): losses and metrics are means over the counted targets of the global batch (the
        task's ``counted``), the same on every strategy."""
        counts = callable(getattr(self.task, "counted", None))
        masks = bool(getattr(datamodule, "masks_targets", False))
        self.training_step.counts_targets = counts and (masks or self.training_step.rollouts is not None)
        self.evaluation.counts_targets = counts and masks

    def _sample_rollouts(self) -> None:
        """A task that samples its training micro-batches from the policy (``rollout``: task=grpo): the
        engine's part of it (engine/rollout_steps.py)."""
        if not callable(getattr(self.task, "rollout", None)):
            return
        st = self.state
        self.training_step.rollouts = RolloutSteps(
            self.task,
            self.strategy,
            self.precision,
            self.loaders.on_device,
            self.config.accumulate_grad_batches,
            lambda: (st.global_step, st.current_epoch, self.num_training_batches - st.batch_in_epoch),
            self.evaluation.decoding,
        )

    def _restore_datamodule(self, ckpt_path) -> None:
        """The datamodule's own state in the checkpoint (Lightning's ``load_state_dict``), if both have one."""
        from framework.engine.checkpoint import load_datamodule_state

        restore = getattr(self.datamodule, "load_state_dict", None)
        state = load_datamodule_state(ckpt_path, self.trust_checkpoint) if callable(restore) else None
        if state is not None:
            restore(state)

    def _warn_if_nothing_logged(self) -> None:
        """A run shorter than ``log_every_n_steps`` logs no train/* metric (Lightning warns too)."""
        c = self.config
        per_epoch = self.num_training_batches // max(1, c.accumulate_grad_batches)
        runs = [n for n in (c.max_steps, (c.max_epochs or 0) * per_epoch) if n and n > 0]
        steps = min(runs) if runs else None
        if steps is not None and steps < c.log_every_n_steps and not c.fast_dev_run and self.is_global_zero:
            log.warning(
                "trainer.log_every_n_steps=%d, but this run trains %d step(s): no train/* metric will be logged; "
                "set trainer.log_every_n_steps=%d or less",
                c.log_every_n_steps,
                steps,
                max(1, steps),
            )

    def validate(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None) -> dict[str, float]:
        """The validation loop on the trained model, or on ``model``; weights as for ``test``."""
        datamodule.setup("validate")
        self._count_targets(datamodule)
        self._model_for("validate", model, ckpt_path)
        loader = self.loaders.make(datamodule.val_dataloader(), train=False)
        return self._run_guarded(lambda: self.evaluation.evaluate(self, loader, "val"))

    def test(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None) -> dict[str, float]:
        """Run the test loop on the trained model, or on ``model`` (set up by the strategy); with
        the weights of the checkpoint ``ckpt_path`` when given."""
        datamodule.setup("test")
        self._count_targets(datamodule)
        self._model_for("test", model, ckpt_path)
        loader = self.loaders.make(datamodule.test_dataloader(), train=False)
        if loader is None and self.is_global_zero:
            log.warning("Testing: the datamodule's test_dataloader() returned None: nothing to test")
        return self._run_guarded(lambda: self.evaluation.evaluate(self, loader, "test"))

    def predict(self, datamodule, model: Optional[torch.nn.Module] = None, ckpt_path=None):
        """The outputs of ``task.predict_step(model, batch)`` (without one: ``model(inputs)``) for
        every sample of ``datamodule.predict_dataloader()`` (up to ``limit_predict_batches``), in
        dataset order, on rank 0 (None on the other ranks). Model and weights as for ``test``."""
        datamodule.setup("predict")
        self._model_for("predict", model, ckpt_path)
        loader = self.loaders.make(datamodule.predict_dataloader(), train=False)
        if loader is None:
            raise ValueError("datamodule: predict_dataloader() returned None; there is nothing to predict")
        return self._run_guarded(lambda: self.evaluation.predict(self, loader))

    def use_weights(self, ckpt_path) -> None:
        """The trained model's weights replaced by those of the checkpoint ``ckpt_path`` (best, last: what
        the stages after training score), as ``test(ckpt_path=...)`` loads them."""
        self._model_for("predict", None, ckpt_path)

    def inference(self, model: Optional[torch.nn.Module] = None, ckpt_path=None):
        """Context for forwards of one's own outside the loops (lm-evaluation-harness's scoring): the
        trained model, or ``model`` set up by the strategy with the checkpoint's weights, as for
        ``predict``; yields the model to call (``EvaluationPasses.inference``)."""
        if model is not None or self.model is None:
            self._model_for("predict", model, ckpt_path)
        return self.evaluation.inference(self)

    def _model_for(self, stage: str, model: Optional[torch.nn.Module], ckpt_path) -> None:
        """The model a validate, test or predict pass runs: the trained one, or ``model`` set up
        by the strategy; with the weights of the checkpoint ``ckpt_path`` when given."""
        if model is not None:
            self.model, _ = prepare_model(model, self.config, self.precision, self.strategy, training=False)
        if self.model is None:
            raise RuntimeError(f"no model: call fit() first or pass model= to {stage}()")
        if ckpt_path is not None:
            from framework.engine.checkpoint import load_model_checkpoint

            load_model_checkpoint(ckpt_path, self, self.trust_checkpoint)
            log.info(
                "%s with the weights of %s",
                {"test": "Testing", "predict": "Predicting"}.get(stage, "Validating"),
                ckpt_path,
            )

    def _resume(self, ckpt_path) -> None:
        from framework.engine.checkpoint import load_checkpoint

        load_checkpoint(ckpt_path, self, self.trust_checkpoint)
        log.info("Resumed from %s at epoch %d, step %d", ckpt_path, self.current_epoch, self.global_step)
        self._warn_if_done()
        for logger in self.loggers:
            if callable(getattr(logger, "resume", None)):
                logger.resume(self.global_step)

    def _warn_if_done(self) -> None:
        """A resume past the limits it runs under trains nothing: said, not only shown by the step count."""
        steps, epochs = self.config.max_steps, self.config.max_epochs
        if not unlimited(steps) and self.global_step >= steps:
            reached = f"trainer.max_steps={steps} (step {self.global_step})"
        elif not unlimited(epochs) and self.current_epoch >= epochs:
            reached = f"trainer.max_epochs={epochs} (epoch {self.current_epoch})"
        else:
            return
        log.warning("The checkpoint has reached %s already: nothing trains; raise it to train on", reached)

    # ---------------------------------------------------------------- checkpoint state
    def sharded_callback_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The tensors of callbacks that keep some laid out like the model (EMA, SWA), by state key:
        saved and loaded (in place) through torch.distributed.checkpoint with the model."""
        return self.callbacks.sharded_state(self)

    def state_dict(self) -> dict:
        """The loop's state for a checkpoint (model and optimizer are saved by the strategy)."""
        return {
            "sharded_callbacks": list(self.callbacks.sharded_keys),
            "loop": asdict(self.state),
            "logged_metrics": dict(self.logged_metrics),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "scaler": self.precision.scaler.state_dict() if self.precision.scaler is not None else None,
            "callbacks": self.callbacks.state_dict(),
            "datamodule": self.datamodule_state(),
            "task": self.task_state(),
        }

    def task_state(self) -> Optional[dict]:
        """The task's ``state_dict()`` where it keeps one across steps (task=grpo's sampled answers)."""
        saves = callable(getattr(self.task, "state_dict", None)) and callable(
            getattr(self.task, "load_state_dict", None)
        )
        return self.task.state_dict() if saves else None

    def datamodule_state(self) -> Optional[dict]:
        """The datamodule's ``state_dict()`` (Lightning's DataModule hook: a corpus's identity), when it
        has one and can load it back."""
        dm = self.datamodule
        saves = callable(getattr(dm, "state_dict", None)) and callable(getattr(dm, "load_state_dict", None))
        return dm.state_dict() if saves else None

    def load_state_dict(self, state: dict) -> None:
        self.state = LoopState(**state["loop"])
        self.logged_metrics.update(state["logged_metrics"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            stretched = self.scheduler_spec.load(self.scheduler, state["scheduler"])
            if stretched and self.is_global_zero:
                log.warning(
                    "scheduler.%s: null, the run's length: %d %ss now (the checkpoint's run: %d); the learning "
                    "rate follows the longer schedule from here (lr %s)",
                    stretched[0],
                    stretched[2],
                    self.scheduler_spec.interval,
                    stretched[1],
                    ", ".join(f"{lr:.3g}" for lr in self.scheduler.get_last_lr()),
                )
        if self.precision.scaler is not None and state.get("scaler") is not None:
            self.precision.scaler.load_state_dict(state["scaler"])
        if state.get("task") is not None and callable(getattr(self.task, "load_state_dict", None)):
            self.task.load_state_dict(state["task"])
            if self.training_step.rollouts is not None:
                self.training_step.rollouts.resumed()
        saved = self.callbacks.load_states(state.get("callbacks", {}))
        if saved and self.is_global_zero:
            log.warning(
                "The checkpoint holds state of callbacks that are not configured now: %s "
                "(configured: %s); that state is not used",
                ", ".join(sorted(saved)),
                ", ".join(self.callbacks.keys) or "none",
            )

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
        self.stopping.finish_vote()
        self.strategy.end_training(self.model)
        # A run cut short by max_steps still reports validation metrics of its final weights.
        if (
            val_loader is not None
            and st.last_val_step != st.global_step
            and st.global_step > 0
            and self.interrupted is None
        ):
            self.evaluation.evaluate(self, val_loader, "val")
        self._call("on_fit_end")

    def _reloaded(self, train: DataLoader, val: Optional[DataLoader]) -> tuple[DataLoader, Optional[DataLoader]]:
        """``reload_dataloaders_every_n_epochs``: the datamodule's loaders anew at the start of every
        N-th epoch (not mid-epoch, where a resumed run continues the loader it started with)."""
        n, st = self.config.reload_dataloaders_every_n_epochs, self.state
        if getattr(self.datamodule, "reload_next_epoch", False) and not st.batch_in_epoch:
            # a resumed epoch over the windows it had is over: the corpus's new ones join now
            train = self.loaders.make(self.datamodule.train_dataloader(), train=True)
            self.num_training_batches = limit_batches(len(train), self.config.limit_train_batches)
            return train, val
        if not n or st.current_epoch == 0 or st.current_epoch % n or st.batch_in_epoch:
            return train, val
        train = self.loaders.make(self.datamodule.train_dataloader(), train=True)
        self.num_training_batches = limit_batches(len(train), self.config.limit_train_batches)
        return train, (self.loaders.make(self.datamodule.val_dataloader(), train=False) if val is not None else None)

    def _should_train(self) -> bool:
        cfg, st = self.config, self.state
        return (
            self.num_training_batches > 0
            and not self.stopping.stops_now(st, self.num_training_batches)
            and (unlimited(cfg.max_epochs) or st.current_epoch < cfg.max_epochs)
            and not self.stopping.max_steps_reached(st)
        )

    def _train_epoch(self, loader: DataLoader, val_loader: Optional[DataLoader]) -> None:
        """The epoch's remaining batches, one optimizer step (accumulation window) at a time,
        with mid-epoch validation every ``val_check_interval`` batches."""
        st, n, accum = self.state, self.num_training_batches, self.config.accumulate_grad_batches
        loader.sampler.set_epoch(st.current_epoch)
        # Resuming mid-epoch: the sampler starts after the batches already trained on.
        loader.sampler.set_start(min(st.batch_in_epoch, n) * loader.batch_size)
        self.loaders.generator.manual_seed(self.seed + st.current_epoch)
        self.model.train()
        if self.epoch_metrics is not None and not st.batch_in_epoch:
            self.epoch_metrics.reset("train")
        self._call("on_train_epoch_start")
        batches, val_every = iter(loader), self._val_every(n)
        self._t_prev = time.perf_counter()
        while st.batch_in_epoch < n and not self.stopping.stops_now(st, n):
            first = st.batch_in_epoch
            self._train_step(batches, min(accum, n - first))
            if (
                self._validates_this_epoch(val_loader)
                and st.batch_in_epoch // val_every > first // val_every
                and st.batch_in_epoch < n
            ):
                self.evaluation.evaluate(self, val_loader, "val")
                self.stopping.agree()
                self._t_prev = time.perf_counter()
            if self.stopping.max_steps_reached(st):
                self.should_stop = True

    def _train_step(self, batches, size: int) -> None:
        """One optimizer step (``TrainingStep``), then what the loop does after it: count it and
        time it, step the scheduler, track and log the loss, vote on stopping, call the callbacks."""
        st = self.state

        def micro_batch_done(loss: torch.Tensor, last: bool) -> None:
            st.batch_in_epoch += 1
            if not last:  # the last one's hook runs after the optimizer step
                self._call("on_train_batch_end", loss, st.batch_in_epoch - 1)

        step_loss, metrics, loss = self.training_step.run(self.model, self.optimizer, batches, size, micro_batch_done)
        st.global_step += 1
        now = time.perf_counter()
        self.step_times.append(now - self._t_prev)
        self._t_prev = now
        self.train_samples += size * self.loaders.micro_batch_global_size
        spec = self.scheduler_spec
        if spec is not None and spec.interval == "step" and st.global_step % spec.frequency == 0:
            self.scheduler.step()
        if self.config.detect_nonfinite:
            self.stopping.track_loss(step_loss)
        if st.global_step % self.config.log_every_n_steps == 0:
            self._log_train(step_loss, size, metrics)
            self.check_finite()
        if self.stopping.votes_each_step:
            self.stopping.vote()
        self._call("on_train_batch_end", loss, st.batch_in_epoch - 1)
        if self.callbacks.has("on_train_step_end"):
            self._call("on_train_step_end", TrainingStep.mean_loss(step_loss, size))

    def _end_epoch(self, val_loader: Optional[DataLoader]) -> None:
        """Validation, the epoch-interval scheduler step and the callbacks, once the epoch's
        batches are all run (a stopped epoch only gets its callbacks)."""
        st, n, cfg = self.state, self.num_training_batches, self.config
        finished = st.batch_in_epoch >= n
        if (
            finished
            and self._validates_this_epoch(val_loader)
            and st.last_val_step != st.global_step
            and (isinstance(cfg.val_check_interval, float) or n % self._val_every(n) == 0)
        ):
            self.evaluation.evaluate(self, val_loader, "val")
        spec = self.scheduler_spec
        if finished and spec is not None and spec.interval == "epoch" and (st.current_epoch + 1) % spec.frequency == 0:
            self.scheduler.step()
        if finished and self.epoch_metrics is not None and self.epoch_metrics.tracks("train"):
            self.log_metrics({f"train/{k}": v for k, v in self.epoch_metrics.compute("train").items()})
        st.epoch_finished = finished
        self.check_finite()
        self._call("on_train_epoch_end")
        self.stopping.agree()

    def _validates_this_epoch(self, val_loader: Optional[DataLoader]) -> bool:
        return val_loader is not None and (self.state.current_epoch + 1) % self.config.check_val_every_n_epoch == 0

    def _val_every(self, n: int) -> int:
        interval = self.config.val_check_interval
        if isinstance(interval, float):
            return max(1, int(n * interval)) if interval < 1.0 else max(1, n)
        return max(1, interval)

    # ---------------------------------------------------------------- events and logging
    def _call(self, event: str, *args) -> None:
        self.callbacks.call(event, self, *args)

    def _run_guarded(self, body: Callable):
        try:
            return body()
        except BaseException as err:
            self._call("on_exception", err)
            raise

    def _log_train(self, step_loss: torch.Tensor, micro: int, metrics: dict) -> None:
        # The only place a training step's loss leaves the device: every log_every_n_steps.
        values = [step_loss / micro] + [m.detach().float() for m in metrics.values()]
        reduced = all_reduce(torch.stack(values).float(), "mean").tolist()
        out = {"train/loss": reduced[0], **{f"train/{k}": v for k, v in zip(metrics, reduced[1:])}}
        self.log_metrics(out)

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        """Record ``metrics`` (floats) at ``step`` (default: the current optimizer step) in every logger."""
        self.logged_metrics.update(metrics)
        if self.loggers:
            row = {**metrics, "epoch": self.current_epoch}
            for logger in self.loggers:
                logger.log_metrics(row, self.global_step if step is None else step)

    # ---------------------------------------------------------------- the run's length
    def planned_steps(self) -> Optional[int]:
        """The optimizer steps this run trains for at most: ``max_steps``, or ``max_epochs`` of
        them, whichever ends first (None: neither limits the run)."""
        epochs, steps = self.config.max_epochs, self.config.max_steps
        limits = [] if unlimited(epochs) else [epochs * self._steps_per_epoch()]
        if not unlimited(steps):
            limits.append(steps)
        return min(limits) if limits else None

    def _steps_per_epoch(self) -> int:
        return math.ceil(self.num_training_batches / self.config.accumulate_grad_batches)

    def _scheduler_intervals(self, interval: str) -> int:
        """How many times the scheduler will step in this run (for T_max / total_steps = null)."""
        epochs = self.config.max_epochs
        if interval == "epoch":
            if unlimited(epochs):
                return max(1, math.ceil(self.config.max_steps / max(1, self._steps_per_epoch())))
            return max(1, epochs)
        return max(1, self.planned_steps() or 1)
