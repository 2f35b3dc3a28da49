"""Keys one option of a group leaves behind when another option replaces it.

An experiment's keys for a group are merged onto whichever option the command line selects:
``experiment=gpt_text scheduler=none`` leaves the experiment's ``scheduler.interval`` with no
scheduler, and ``+strategy._target_=pkg.Mine`` on the default ``strategy=auto`` keeps auto's own
keys beside the user's class. Neither should break the selection."""

from __future__ import annotations

import dataclasses

from framework.config.schemas import AutoStrategyConfig, SchedulerConfig, StrategyConfig

SCHEDULER_KEYS = {f.name for f in dataclasses.fields(SchedulerConfig)}
_AUTO_ONLY = {
    f.name: f.default
    for f in dataclasses.fields(AutoStrategyConfig)
    if f.name not in {g.name for g in dataclasses.fields(StrategyConfig)}
}


def settled_scheduler(scheduler):
    """``scheduler=none``: the settings alone, with no scheduler to step, are a constant learning
    rate, as selected (None), not a scheduler without ``_target_``."""
    leftover = isinstance(scheduler, dict) and "_target_" not in scheduler and set(scheduler) <= SCHEDULER_KEYS
    return None if leftover else scheduler


def drop_auto_keys(strategy) -> list[str]:
    """``strategy._target_`` on ``strategy=auto`` replaces auto: its own keys go (from ``strategy``, in
    place); those set to something else than auto's defaults are named, since the user meant them for
    an option no longer selected."""
    if not (isinstance(strategy, dict) and strategy.get("_target_") and strategy.get("name") == "auto"):
        return []
    problems = []
    for key in [k for k in strategy if k in _AUTO_ONLY]:
        if strategy.pop(key) != _AUTO_ONLY[key]:
            problems.append(
                f"strategy.{key}: a key of strategy=auto, which strategy._target_ replaces; select "
                "strategy=single (or a strategy YAML of your own) to pass keys to your class"
            )
    return problems
