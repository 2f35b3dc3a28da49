"""The contracts of the plug-ins the engine calls (Callback, Logger, DataModule, Task), and the
view of the Trainer that callbacks read (TrainerView).

Nothing is inherited: any object with these methods works (``typing.Protocol``). Validation
checks every configured ``_target_`` class against its contract before any process starts
(``Contract.problems``), so a misspelled hook or a logger without ``finalize`` is a config
error naming the key, not a failure after training.
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any, ContextManager, Optional, Protocol

import torch


class TrainerView(Protocol):
    """What a callback may read of the Trainer it is given (and the two ways it may stop the run).
    Everything else on the Trainer is the engine's own. All ranks hold the same values but for
    the per-rank ones (``rank``, ``current_batch``, ``step_times``)."""

    config: Any  # the TrainerConfig in effect (debugging shortcuts spelled out)
    state: Any  # LoopState: global_step, current_epoch, batch_in_epoch, epoch_finished, last_val_step
    model: Optional[torch.nn.Module]  # as the strategy wrapped it (a DDP/FSDP module)
    optimizer: Optional[torch.optim.Optimizer]  # as the strategy built it
    scheduler: Any
    loggers: list  # rank 0's loggers (empty on the other ranks)
    logged_metrics: dict[str, float]  # the latest value of every metric, reduced over ranks
    num_training_batches: int  # training batches per epoch (limits applied)
    step_times: list[float]  # seconds per optimizer step on this rank, data loading included
    train_samples: int  # samples trained on so far, over all ranks
    should_stop: bool  # set True to stop after this step (early stopping); every rank agrees

    @property
    def global_step(self) -> int: ...  # optimizer steps taken
    @property
    def current_epoch(self) -> int: ...
    @property
    def is_global_zero(self) -> bool: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def device(self) -> torch.device: ...
    @property
    def unwrapped_model(self) -> Optional[torch.nn.Module]: ...  # the user's model inside the wrapper
    @property
    def inner_optimizer(self) -> Any: ...  # the configured optimizer class inside the strategy's
    @property
    def global_batch_size(self) -> int: ...  # samples per optimizer step, accumulation included
    @property
    def current_batch(self) -> Any: ...  # the training micro-batch just run, on the device

    def log_metrics(self, metrics: dict[str, float], step: Optional[int] = None) -> None:
        """Record ``metrics`` in ``logged_metrics`` and every logger (call it on every rank)."""

    def request_stop(self) -> None:
        """Stop every rank after the same step on this rank's decision alone (its clock, say)."""

    def check_finite(self) -> bool:
        """False once the training loss was NaN or infinite (a collective: every rank calls it)."""

    def planned_steps(self) -> Optional[int]:
        """The optimizer steps the run trains for at most (None: unlimited)."""


class Callback(Protocol):
    """Every hook is optional: the engine calls those a callback defines, in this order. Each
    receives the engine's ``Trainer`` first, read through ``TrainerView``. All ranks call every hook (a hook may run a
    collective, such as a checkpoint save); the metrics passed are already reduced over ranks.

    Optional state (saved in checkpoints, keyed by the callback's config name, or by its
    ``state_key`` attribute when it has one): ``state_dict() -> dict`` and
    ``load_state_dict(dict)``, called after the strategy set up the model.
    """

    def on_fit_start(self, trainer) -> None:
        """Once, after model and optimizer are set up and a checkpoint (if any) is loaded."""

    def on_train_epoch_start(self, trainer) -> None:
        """At the start of every training epoch (``trainer.current_epoch``), resumed ones too."""

    def on_train_batch_end(self, trainer, loss: torch.Tensor, batch_idx: int) -> None:
        """After each training batch's backward (``loss``: its detached loss); for the last batch
        of an accumulation window, after the optimizer step."""

    def on_train_step_end(self, trainer, loss: torch.Tensor) -> None:
        """After each optimizer step (``trainer.global_step`` counts it) and its batch's
        on_train_batch_end; ``loss``: the step's detached loss, the mean over its accumulation
        window's micro-batches."""

    def on_validation_start(self, trainer) -> None:
        """Before a validation pass (mid-epoch, at an epoch's end, or after a run cut short)."""

    def on_validation_end(self, trainer, metrics: dict[str, float]) -> None:
        """After a validation pass, with its metrics (``val/loss``, ...)."""

    def on_train_epoch_end(self, trainer) -> None:
        """After an epoch's last batch, its validation and its epoch-interval scheduler step."""

    def on_fit_end(self, trainer) -> None:
        """Once, when training ends (any reason but an exception)."""

    def on_test_start(self, trainer) -> None:
        """Before the test pass."""

    def on_test_end(self, trainer, metrics: dict[str, float]) -> None:
        """After the test pass, with its metrics (``test/loss``, ...)."""

    def on_exception(self, trainer, error: BaseException) -> None:
        """When fit or test raises (the error is raised again afterwards)."""

    def evaluation_weights(self, trainer, stage: str) -> ContextManager:
        """Optional: a context the forwards of a ``stage`` pass ("val", "test", "predict") run
        inside, entered after on_validation_start / on_test_start and left before the matching
        end hook (EMA and SWA swap their averaged weights in and out)."""

    def sharded_state_dict(self, trainer) -> dict[str, torch.Tensor]:
        """Optional: tensors laid out like the model's (FSDP shards included), saved with the model
        through torch.distributed.checkpoint and loaded into the same tensors in place."""


EVENTS = tuple(name for name in vars(Callback) if name.startswith("on_"))


class Logger(Protocol):
    """Receives metrics on rank 0 only."""

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """``metrics`` at optimizer step ``step``; an ``epoch`` entry is included."""

    def log_hparams(self, params: dict[str, Any], metrics: dict[str, float]) -> None:
        """Once at the end of a completed run: the flat resolved config and the final metrics."""

    def finalize(self, status: str) -> None:
        """Once at the end of every run ("completed", "failed"): flush and close."""

    def resume(self, step: int) -> None:
        """Optional: the run resumed from a checkpoint at ``step``; what was logged after it
        (before the interruption) is the future of a run that did not happen."""


class DataModule(Protocol):
    """Datasets in, DataLoaders with the GLOBAL batch size out; the engine re-creates each
    loader with the per-rank batch and its own sampler, so it never needs to know the ranks."""

    def setup(self, stage: str) -> None:
        """Prepare the datasets for ``stage``: "fit", "validate" or "test"."""

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        """Map-style dataset, ``batch_size`` = the global batch; a RandomSampler means shuffle."""

    def val_dataloader(self) -> Optional[torch.utils.data.DataLoader]:
        """The validation loader, or None for no validation."""

    def test_dataloader(self) -> Optional[torch.utils.data.DataLoader]:
        """Optional (needed with ``test=true``, the default): the test loader, or None for no test."""

    def predict_dataloader(self) -> Optional[torch.utils.data.DataLoader]:
        """Optional (needed with ``predict=true``): the loader to predict on; batches are
        ``(inputs, ...)`` or bare inputs."""

    # Optional: ``masks_targets = True`` where the targets leave out (the task's ignore_index) a number
    # of tokens that varies by batch, instruction data's prompts: the engine then trains on the mean
    # over the global batch's counted targets (the task's ``counted``), on every strategy and
    # accumulation alike, not on a mean of micro-batch means.

    # With trainer.reload_dataloaders_every_n_epochs, the engine sets a ``trainer`` attribute (a
    # TrainerView) before it asks for loaders again, so that they may depend on its current_epoch.


class Task(Protocol):
    """Turns a batch into a loss and metrics.

    Optional: an ``epoch_metrics`` attribute (``framework.tasks.metrics.EpochMetrics``) for
    metrics that are not means of batch values (F1, AUROC); ``step`` feeds it each batch with
    ``epoch_metrics.update(stage, preds, target)`` and the engine computes it over every rank's
    samples at the end of each pass.

    Optional: ``predict_step(model, batch) -> tensor`` (one row per sample, or a mapping of such
    tensors) for ``predict=true``; without it the predict loop returns ``model(inputs)``.

    Optional, a task that samples its training micro-batches from the policy (task=grpo; the engine's
    part: engine/rollout_steps.py): ``rollout(model, prompts, context)`` samples a window from the
    loader's micro-batches ``prompts`` (every ``steps_per_generation`` of them, null: one optimizer
    step's), ``rollouts_left`` counts the window's micro-batches not trained on, ``next_rollout(rank,
    ranks)`` gives the next one's part for a data-parallel rank, ``rollout_rows(rank, ranks)`` the rows
    the loader gives again after a resume; ``state_dict()`` / ``load_state_dict(state)`` keep the window
    in the checkpoint."""

    def step(self, model: torch.nn.Module, batch, stage: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``stage``: "train", "val" or "test". Returns the batch's mean loss (0-d, with grad in
        training) and metrics that are batch means (0-d tensors); the engine weights them by
        batch size across batches and ranks."""

    def loss(self, output, targets) -> torch.Tensor:
        """Optional (needed with strategy=pp): the training loss of the model's ``output`` for
        ``targets``, as ``step`` computes it; a pipeline's last stage calls it on each
        micro-batch's output, inside the schedule that runs the model."""

    def counted(self, targets) -> torch.Tensor:
        """Optional (used where the datamodule ``masks_targets``): how many of ``targets`` (a batch's
        second element) the mean loss averages over, a 0-d integer tensor."""


@dataclass(frozen=True)
class Contract:
    """What the engine calls on a configured class of a group: the protocol's methods, less the
    ``optional`` ones. Functions and other factories are not checked (what they return is unknown)."""

    protocol: Optional[type] = None  # None: a group without a contract (the model)
    optional: frozenset = frozenset()

    @classmethod
    def of(cls, group: str) -> "Contract":
        return CONTRACTS.get(group, cls())

    def problems(self, obj: Any, key: str) -> list[str]:
        """What the class ``obj`` (the ``_target_`` at config key ``key``) lacks of the contract."""
        protocol = self.protocol
        if protocol is None or not inspect.isclass(obj):
            return []
        required = [n for n in vars(protocol) if not n.startswith("_") and callable(vars(protocol)[n])]
        needed = [n for n in required if n not in self.optional]
        return [
            f"{key}._target_: {obj.__qualname__} has no method {name}() "
            f"(a {protocol.__name__} needs: {', '.join(needed)})"
            for name in required
            if name not in self.optional and not callable(getattr(obj, name, None))
        ]


class CallbackContract(Contract):
    """A callback's: its methods named ``on_*`` are hooks the engine calls, and its state is saved
    and loaded both or neither."""

    def problems(self, obj: Any, key: str) -> list[str]:
        problems = super().problems(obj, key)
        if self.protocol is None or not inspect.isclass(obj):
            return problems
        for name in dir(obj):
            if name.startswith("on_") and name not in EVENTS and callable(getattr(obj, name)):
                close = difflib.get_close_matches(name, EVENTS, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                problems.append(
                    f"{key}._target_: {obj.__qualname__}.{name} is not a callback hook{hint} "
                    f"(hooks: {', '.join(EVENTS)})"
                )
        has_save, has_load = callable(getattr(obj, "state_dict", None)), callable(getattr(obj, "load_state_dict", None))
        if has_save != has_load:
            problems.append(
                f"{key}._target_: {obj.__qualname__} defines {'state_dict' if has_save else 'load_state_dict'}"
                f"() without {'load_state_dict' if has_save else 'state_dict'}(); a checkpointed callback "
                "needs both"
            )
        return problems


CONTRACTS = {
    "callbacks": CallbackContract(Callback, frozenset({*EVENTS, "evaluation_weights", "sharded_state_dict"})),
    "logger": Contract(Logger, frozenset({"resume"})),
    "datamodule": Contract(DataModule, frozenset({"test_dataloader", "predict_dataloader"})),
    "task": Contract(Task, frozenset({"loss", "counted"})),
}
