"""Turn a validated config into objects: datamodule, model, task, optimizer/scheduler partials,
loggers, callbacks, and the Trainer that runs them. Logs what it builds, so a run's log
explains itself."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, ModelSummary, ProgressBar, Timer
from framework.callbacks.profiler import PROFILERS
from framework.config.durations import parse_duration
from framework.config.environment import RankEnv
from framework.config.experiment import Experiment
from framework.config.param_groups import OptimizerFactory
from framework.config.schemas import SchedulerConfig, TrainerConfig
from framework.config.validate import FRAMEWORK_KEYS, import_target
from framework.engine.attempts import promote
from framework.engine.scheduler import SchedulerSpec
from framework.engine.seed import seed_everything, set_debug_flags, set_deterministic
from framework.engine.trainer import Trainer
from framework.engine.transfer_learning import apply_init
from framework.models.lora import base_fingerprint
from framework.strategies import Strategy, build_strategy

log = logging.getLogger(__name__)


@dataclass
class Components:
    datamodule: object
    model: object
    task: object
    optimizer_factory: Callable
    scheduler: Optional[SchedulerSpec]
    loggers: list = field(default_factory=list)
    callbacks: dict = field(default_factory=dict)  # config name -> callback


def _make(node: DictConfig, what: str):
    log.info("Instantiating %s <%s>", what, node._target_)
    return instantiate(node, _convert_="all")


def build_scheduler(node: Optional[DictConfig]) -> Optional[SchedulerSpec]:
    if not node:
        return None
    framework_keys = FRAMEWORK_KEYS["scheduler"]
    settings = SchedulerConfig(**{k: node[k] for k in framework_keys if k in node})
    factory_cfg = OmegaConf.create({k: v for k, v in node.items() if k not in framework_keys})
    return SchedulerSpec(_make(factory_cfg, "scheduler"), settings.interval, settings.frequency)


def build_optimizer_factory(node: DictConfig) -> OptimizerFactory:
    """The optimizer partial (what strategies complete with parameters) and its declared groups."""
    groups = OmegaConf.to_container(node.param_groups, resolve=True) if node.get("param_groups") else []
    partial = _make(OmegaConf.create({k: v for k, v in node.items() if k != "param_groups"}), "optimizer")
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


def build_callbacks(cfg: DictConfig) -> dict:
    """The configured callbacks by config name, with those the trainer keys ask for (progress bar,
    model summary, timer, profiler) and without those they turn off."""
    callbacks = {name: _make(node, f"callback '{name}'") for name, node in (cfg.get("callbacks") or {}).items() if node}
    if cfg.get("attempt"):  # first: the run's record is this attempt's before any callback writes into the run
        callbacks = {"attempt_record": AttemptRecord(cfg.output_dir, cfg.attempt), **callbacks}
    trainer = cfg.trainer
    _switch(callbacks, trainer.enable_progress_bar, ProgressBar, "progress_bar", ProgressBar)
    _switch(callbacks, trainer.get("enable_model_summary", True), ModelSummary, "model_summary", ModelSummary)
    _switch(callbacks, trainer.get("enable_checkpointing", True), ModelCheckpoint, "model_checkpoint")
    if trainer.get("max_time") is not None:
        max_time = parse_duration(
            OmegaConf.to_container(trainer.max_time) if OmegaConf.is_config(trainer.max_time) else trainer.max_time
        )
        timers = [cb for cb in callbacks.values() if isinstance(cb, Timer)]
        for timer in timers:  # trainer.max_time is the duration of a configured timer too
            timer.duration = max_time
        if not timers:
            callbacks["timer"] = Timer(max_time)
    if cfg.trainer.get("profiler"):
        callbacks["profiler"] = PROFILERS[cfg.trainer.profiler](str(cfg.output_dir))
    if cfg.trainer.get("fast_dev_run"):
        # Lightning's fast_dev_run: a check of the pipeline that leaves nothing to resume from or monitor
        skipped = [name for name, cb in callbacks.items() if isinstance(cb, FAST_DEV_RUN_SKIPS)]
        callbacks = {name: cb for name, cb in callbacks.items() if name not in skipped}
        if skipped:
            log.info("fast_dev_run: callbacks %s do not run", ", ".join(skipped))
    return callbacks


def build_components(cfg: DictConfig, is_global_zero: bool, on_meta: bool = False) -> Components:
    """Instantiate every component of ``cfg``; loggers exist on rank 0 only. ``on_meta``: the model
    on the meta device, when it can initialise itself later (``init_weights``) and no initial
    weights are loaded into it whole (``init.weights``)."""
    datamodule = _make(cfg.datamodule, "datamodule")
    target = import_target(str(cfg.model._target_))
    on_meta = on_meta and callable(getattr(target, "init_weights", None)) and not (cfg.get("init") or {}).get("weights")
    on_meta = on_meta and not (cfg.get("adapter") or {}).get("quantize")  # (QLoRA quantizes the whole weights)
    with torch.device("meta") if on_meta else contextlib.nullcontext():
        model = _make(cfg.model, "model on the meta device" if on_meta else "model")
    if cfg.get("adapter"):
        add_adapters(model, OmegaConf.to_container(cfg.adapter, resolve=True))
        model.adapter_base = base_fingerprint(  # what its checkpoints record of the frozen base
            OmegaConf.to_container(cfg.model, resolve=True),
            torch.initial_seed(),
            (cfg.get("init") or {}).get("weights"),
        )
    task = _make(cfg.task, "task")
    if callable(getattr(task, "connect", None)):  # what the task takes from the data (a tokenizer's special ids)
        task.connect(datamodule)
    optimizer_factory = build_optimizer_factory(cfg.optimizer)
    scheduler = build_scheduler(cfg.get("scheduler"))
    loggers = []
    if is_global_zero and not cfg.trainer.get("fast_dev_run"):  # fast_dev_run writes no logger files
        loggers = [_make(node, f"logger '{name}'") for name, node in (cfg.get("logger") or {}).items() if node]
    return Components(datamodule, model, task, optimizer_factory, scheduler, loggers, build_callbacks(cfg))


def add_adapters(model, node: dict) -> None:
    """``adapter=lora|qlora``: the model's target layers adapted, everything else frozen."""
    from framework.models.lora import AdapterSettings, inject_adapters

    settings = AdapterSettings(**node)
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
    cfg: DictConfig, env: RankEnv = RankEnv(), strategy: Optional[Strategy] = None, signals=None
) -> tuple[Trainer, Components]:
    """Seed, build the components of the validated ``cfg`` and the Trainer that runs them on the
    rank ``env`` (with ``strategy`` when it is already built and joined to its group; ``signals``:
    the StopSignals that stop it at a step boundary)."""
    container = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer_cfg = TrainerConfig(**container)
    strategy = strategy or build_strategy(Experiment(OmegaConf.to_container(cfg, resolve=True)), env)
    seed = seed_everything(cfg.get("seed"))  # before any model is built: it draws the initial weights
    set_deterministic(trainer_cfg.deterministic)
    set_debug_flags(trainer_cfg.detect_anomaly, trainer_cfg.benchmark)
    parts = build_components(cfg, strategy.is_global_zero, strategy.builds_on_meta)
    trainer = Trainer(
        trainer_cfg,
        strategy,
        parts.task,
        parts.loggers,
        parts.callbacks,
        seed=seed,
        signals=signals,
        trust_checkpoint=bool(cfg.get("trust_checkpoint")),
    )
    return trainer, parts


def apply_configured_init(cfg: DictConfig, model) -> dict | None:
    """Transfer learning's initial weights, reset and frozen submodules from ``cfg.init`` (None:
    nothing to do), on the plain model before any strategy wraps it."""
    init = cfg.get("init") or {}
    if not (init.get("weights") or init.get("freeze")):
        return None
    return apply_init(
        model,
        init.get("weights"),
        init.get("strict", False),
        list(init.get("reset") or []),
        list(init.get("freeze") or []),
        trust=bool(cfg.get("trust_checkpoint")),
    )


# The moment a later attempt in a run's directory takes the top record: when it trains.
class AttemptRecord:
    """A callback (added by build_trainer for a later attempt): at the start of the fit loop, once
    the checkpoint loaded, rank 0 makes this attempt's config the run's (engine/attempts.py).
    Anything that fails before that point leaves the run's record as it was."""

    def __init__(self, run_dir: str, attempt: int):
        self.run_dir, self.attempt = Path(run_dir), attempt

    def on_fit_start(self, trainer) -> None:
        if trainer.is_global_zero:
            promote(self.run_dir, self.attempt)
