"""Turn a validated config into objects: datamodule, model, task, optimizer/scheduler partials,
loggers and callbacks. Logs what it builds, so a run's log explains itself."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Optional

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.callbacks import ProgressBar
from framework.config.validate import FRAMEWORK_KEYS
from framework.engine.scheduler import SchedulerSpec

log = logging.getLogger(__name__)


@dataclass
class Components:
    datamodule: object
    model: object
    task: object
    optimizer_factory: Callable
    scheduler: Optional[SchedulerSpec]
    loggers: list = field(default_factory=list)
    callbacks: list = field(default_factory=list)


def _make(node: DictConfig, what: str):
    log.info("Instantiating %s <%s>", what, node._target_)
    return instantiate(node, _convert_="all")


def build_scheduler(node: Optional[DictConfig]) -> Optional[SchedulerSpec]:
    if not node:
        return None
    framework_keys = FRAMEWORK_KEYS["scheduler"]
    settings = {k: node[k] for k in framework_keys if k in node}
    factory_cfg = OmegaConf.create({k: v for k, v in node.items() if k not in framework_keys})
    return SchedulerSpec(_make(factory_cfg, "scheduler"), settings.get("interval", "epoch"),
                         settings.get("frequency", 1))


def build_components(cfg: DictConfig, is_global_zero: bool) -> Components:
    """Instantiate every component of ``cfg``; loggers exist on rank 0 only."""
    datamodule = _make(cfg.datamodule, "datamodule")
    model = _make(cfg.model, "model")
    task = _make(cfg.task, "task")
    optimizer_factory = _make(cfg.optimizer, "optimizer")
    scheduler = build_scheduler(cfg.get("scheduler"))
    loggers = []
    if is_global_zero:
        loggers = [_make(node, f"logger '{name}'") for name, node in (cfg.get("logger") or {}).items() if node]
    callbacks = [_make(node, f"callback '{name}'") for name, node in (cfg.get("callbacks") or {}).items() if node]
    # As in Lightning: enable_progress_bar adds a bar when none is configured, and removes any when false.
    has_bar = any(isinstance(cb, ProgressBar) for cb in callbacks)
    if not cfg.trainer.enable_progress_bar:
        callbacks = [cb for cb in callbacks if not isinstance(cb, ProgressBar)]
    elif not has_bar:
        callbacks.append(ProgressBar())
    return Components(datamodule, model, task, optimizer_factory, scheduler, loggers, callbacks)
