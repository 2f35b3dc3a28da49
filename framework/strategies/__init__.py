"""Parallel strategies: how a job's processes are laid out, how a plain model is wrapped or
sharded, how the optimizer steps. One module each, families in a package of their own
(``pipeline/``, ``deepspeed/``, ``horovod/``, ``bagua/``; what they share in ``comm/``); built-in
ones by ``strategy=<name>``, your own by ``strategy._target_: my_pkg.MyStrategy`` (a ``Strategy``
subclass with a schema that extends ``StrategyConfig``). Collectives are plain functions in
``strategies.comm.collectives``.
May import: data, models, tasks, config (never the engine or anything above it)."""

from framework.config.schemas import StrategyConfig
from framework.strategies.base import Strategy
from framework.strategies.registry import (
    StrategyNode,
    adapter_strategies,
    auto_candidates,
    build_strategy,
    is_named,
    launched_layout,
    layout_of,
    planned,
    resolve,
    resolved_options,
    strategy_of,
)

__all__ = [
    "Strategy",
    "StrategyConfig",
    "StrategyNode",
    "adapter_strategies",
    "auto_candidates",
    "build_strategy",
    "is_named",
    "launched_layout",
    "layout_of",
    "planned",
    "resolve",
    "resolved_options",
    "strategy_of",
]
