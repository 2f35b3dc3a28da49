"""Turn a validated config into objects: datamodule, model, task, optimizer/scheduler partials,
loggers, callbacks, and the Trainer that runs them. Logs what it builds, so a run's log
explains itself."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from hydra.utils import instantiate

from framework.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, ModelSummary, ProgressBar, Timer
from framework.callbacks.profiler import PROFILERS
from framework.config.durations import parse_duration
from framework.config.environment import RankEnv
from framework.config.experiment import Experiment
from framework.config.param_groups import OptimizerFactory
from framework.config.schemas import AdapterConfig, SchedulerConfig
from framework.config.validate import FRAMEWORK_KEYS
from framework.engine.attempts import attempt_dir
from framework.engine.scheduler import SchedulerSpec
from framework.engine.seed import seed_everything, set_debug_flags, set_deterministic
from framework.engine.trainer import Trainer
from framework.engine.transfer_learning import apply_init
from framework.models.lora import base_fingerprint
from framework.rank.on_start import PredictionsOnStart, ScoresOnStart
from framework.strategies import Strategy, build_strategy

log = logging.getLogger(__name__)


@dataclass
class Components:
    datamodule: object
    model: object
    task: object
    optimizer_factory: Optional[Callable]  # None: optimizer=none (a run that does not train)
    scheduler: Optional[SchedulerSpec]
    loggers: list = field(default_factory=list)
    callbacks: dict = field(default_factory=dict)  # config name -> callback


def _make(node: dict, what: str):
    """What a component's node (``_target_`` and its arguments) builds."""
    log.info("Instantiating %s <%s>", what, node.get("_target_"))
    return instantiate(node, _convert_="all")


def build_scheduler(node: dict) -> Optional[SchedulerSpec]:
    if not node:
        return None
    framework_keys = FRAMEWORK_KEYS["scheduler"]
    settings = SchedulerConfig(**{k: node[k] for k in framework_keys if k in node})
    factory = {k: v for k, v in node.items() if k not in framework_keys}
    return SchedulerSpec(_make(factory, "scheduler"), settings.interval, settings.frequency)


def build_optimizer_factory(node: dict) -> Optional[OptimizerFactory]:
    """The optimizer partial (what strategies complete with parameters) and its declared groups; None
    for optimizer=none (a run that does not train)."""
    if not node:
        return None
    groups = node.get("param_groups") or []
    partial = _make({k: v for k, v in node.items() if k != "param_groups"}, "optimizer")
    for i, group in enumerate(groups):
        settings = ", ".join(f"{k}={v}" for k, v in group.items() if k != "params")
        log.info("Parameter group %d: %s (%s)", i + 1, group["params"], settings)
    return OptimizerFactory(partial, tuple(groups))


# What fast_dev_run turns off, as in Lightning: checkpoints, early stopping, logger callbacks.
FAST_DEV_RUN_SKIPS = (ModelCheckpoint, EarlyStopping, LearningRateMonitor)


def _switch(callbacks: dict, enabled: bool, kind: type, name: str, make: Optional[Callable] = None) -> None:
    """As Lightning's enable_* flags: false removes every callback of ``kind``; true adds one
    (``make()``) when none is configured."""
    present = [key for key, cb in callbacks.items() if isinstance(cb, kind)]
    if not enabled:
        for key in present:
            del callbacks[key]
    elif not present and make is not None:
        callbacks[name] = make()


def build_callbacks(run: Experiment) -> dict:
    """The configured callbacks by config name, with those the trainer keys ask for (progress bar,
    model summary, timer, profiler) and without those they turn off."""
    callbacks = {name: _make(spec.node, f"callback '{name}'") for name, spec in run.callbacks.items() if spec.node}
    trainer = run.trainer
    _switch(callbacks, trainer.enable_progress_bar, ProgressBar, "progress_bar", ProgressBar)
    _switch(callbacks, trainer.enable_model_summary, ModelSummary, "model_summary", ModelSummary)
    _switch(callbacks, trainer.enable_checkpointing, ModelCheckpoint, "model_checkpoint")
    if trainer.max_time is not None:
        max_time = parse_duration(trainer.max_time)
        timers = [cb for cb in callbacks.values() if isinstance(cb, Timer)]
        for timer in timers:  # trainer.max_time is the duration of a configured timer too
            timer.duration = max_time
        if not timers:
            callbacks["timer"] = Timer(max_time)
    if trainer.profiler:
        callbacks["profiler"] = PROFILERS[trainer.profiler](str(run.output_dir))
    if run.harness.tasks and run.harness.on_start and run.train:
        callbacks["harness_on_start"] = ScoresOnStart(run.harness, str(run.output_dir))
    if run.predict and run.predict_on_start and run.train:
        callbacks["predictions_on_start"] = PredictionsOnStart()
    if trainer.fast_dev_run:
        # Lightning's fast_dev_run: a check of the pipeline that leaves nothing to resume from or monitor
        skipped = [name for name, cb in callbacks.items() if isinstance(cb, FAST_DEV_RUN_SKIPS)]
        callbacks = {name: cb for name, cb in callbacks.items() if name not in skipped}
        if skipped:
            log.info("fast_dev_run: callbacks %s do not run", ", ".join(skipped))
    return callbacks


def build_components(run: Experiment, is_global_zero: bool, on_meta: bool = False) -> Components:
    """Instantiate every component of ``run``; loggers exist on rank 0 only. ``on_meta``: the model
    on the meta device, when it can initialise itself later (``init_weights``) and no initial
    weights are loaded into it whole (``init.weights``)."""
    datamodule = _make(run.datamodule.node, "datamodule")
    model = build_model(run, on_meta)
    task = _make(run.task.node, "task")
    if callable(getattr(task, "connect", None)):  # what the task takes from the data (a tokenizer's special ids)
        task.connect(datamodule)
    optimizer_factory = build_optimizer_factory(run.optimizer.node)
    scheduler = build_scheduler(run.scheduler.node)
    loggers = []
    if is_global_zero and not run.trainer.fast_dev_run:  # fast_dev_run writes no logger files
        loggers = [_make(spec.node, f"logger '{name}'") for name, spec in run.loggers.items() if spec.node]
    for logger in loggers if run.attempt else ():  # a later attempt: its record in attempts/<n>/ (engine/attempts.py)
        if callable(getattr(logger, "record_in", None)):
            logger.record_in(attempt_dir(Path(run.output_dir), run.attempt))
    return Components(datamodule, model, task, optimizer_factory, scheduler, loggers, build_callbacks(run))


def build_model(run: Experiment, on_meta: bool):
    """The model with its adapters (``on_meta``: see ``build_components``). QLoRA's is built on the
    meta device under any strategy where it gives its weights one at a time (``parameter_source``), and
    made real here with its base quantized as it is read (never whole in fp32); another is built whole
    and then quantized."""
    quantized = bool(run.adapter and run.adapter.quantize)
    streamed = quantized and callable(run.model.declared("parameter_source")) and not run.init.weights
    on_meta = on_meta and callable(run.model.declared("init_weights")) and not run.init.weights
    on_meta = (on_meta and not quantized) or streamed
    if quantized:
        from framework.models.qlora import map_large_temporaries, materialize_quantized

        map_large_temporaries()  # (NF4's temporaries, at the build and in every step, given back when freed)
    with torch.device("meta") if on_meta else contextlib.nullcontext():
        model = _make(run.model.node, "model on the meta device" if on_meta else "model")
    if run.adapter is not None:
        add_adapters(model, run.adapter)
        # what its checkpoints record of the frozen base
        model.adapter_base = base_fingerprint(run.model.node, torch.initial_seed(), run.init.weights)
    if streamed:  # (before the strategy: it shards and moves the NF4 base as it did the base built whole)
        count = materialize_quantized(model, torch.initial_seed())
        log.info("QLoRA: %d linear weights quantized to NF4 one at a time, as they were read", count)
    return model


def add_adapters(model, settings: AdapterConfig) -> None:
    """``adapter=lora|qlora``: the model's target layers adapted, everything else frozen."""
    from framework.models.lora import inject_adapters

    names = inject_adapters(model, settings, torch.initial_seed())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info(
        "Adapters (r=%d, alpha=%g%s) on %d layers (%s%s): %d of %d parameters train",
        settings.r,
        settings.alpha,
        ", DoRA" if settings.use_dora else "",
        len(names),
        ", ".join(names[:4]),
        " ..." if len(names) > 4 else "",
        trainable,
        total,
    )


def build_trainer(
    run: Experiment, env: RankEnv = RankEnv(), strategy: Optional[Strategy] = None, signals=None
) -> tuple[Trainer, Components]:
    """Seed, build the components of the validated ``run`` and the Trainer that runs them on the rank
    ``env`` (with ``strategy`` when it is already built and joined to its group; ``signals``: the
    StopSignals that stop it at a step boundary)."""
    trainer_options = dataclasses.replace(run.trainer)  # (the Trainer's own copy)
    strategy = strategy or build_strategy(run, env)
    seed = seed_everything(run.seed)  # before any model is built: it draws the initial weights
    set_deterministic(trainer_options.deterministic)
    set_debug_flags(trainer_options.detect_anomaly, trainer_options.benchmark)
    parts = build_components(run, strategy.is_global_zero, strategy.builds_on_meta)
    trainer = Trainer(
        trainer_options,
        strategy,
        parts.task,
        parts.loggers,
        parts.callbacks,
        seed=seed,
        signals=signals,
        trust_checkpoint=bool(run.trust_checkpoint),
    )
    return trainer, parts


def apply_configured_init(run: Experiment, model) -> dict | None:
    """Transfer learning's initial weights, reset and frozen submodules from ``init`` (None:
    nothing to do), on the plain model before any strategy wraps it."""
    init = run.init
    if not (init.weights or init.freeze):
        return None
    return apply_init(model, init.weights, init.strict, list(init.reset), list(init.freeze), trust=run.trust_checkpoint)
