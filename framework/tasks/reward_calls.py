"""``task.rewards``: the reward functions of ``task=grpo``, each an import path or ``{function: <path>,
weight: <w>, <option>: <value>, ...}`` (the options are keyword arguments bound to the function), called
as TRL calls them: ``f(prompts=..., completions=..., completion_ids=..., <each column of the prompt
rows>=..., trainer_state=..., log_extra=..., log_metric=...)``. A function without ``**kwargs`` gets the
arguments it names only. A function that raises, or returns the wrong number of values, stops the run
with an error naming it and the step."""

from __future__ import annotations

import functools
import inspect
import logging
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable, Optional, Sequence

import torch

from framework.config.validate import import_target

log = logging.getLogger(__name__)

PASSED = ("prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric")


class RewardError(RuntimeError):
    """A reward function that failed, or returned what is not one reward per completion."""


@dataclass(frozen=True)
class RewardFunction:
    """One entry of ``task.rewards``: the function (its options bound), its name (TRL's: the function's
    ``__name__``, the metric ``rewards/<name>/mean``) and its weight."""

    function: Callable
    name: str
    weight: float = 1.0

    @classmethod
    def of(cls, entry) -> "RewardFunction":
        """From a config entry: a path, or ``{function: <path>, weight: <w>, **options}``."""
        if isinstance(entry, str):
            entry = {"function": entry}
        options = {k: v for k, v in dict(entry).items() if k not in ("function", "weight")}
        function = import_target(entry["function"])
        name = getattr(function, "__name__", entry["function"].rsplit(".", 1)[-1])
        bound = functools.partial(function, **options) if options else function
        return cls(bound, name, float(entry.get("weight", 1.0)))

    def wants(self) -> Optional[set[str]]:
        """The arguments the function names (None: it takes ``**kwargs``, every one of them)."""
        parameters = inspect.signature(self.function).parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return None
        return {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}

    def required(self) -> set[str]:
        """The arguments it must be given (named, without a default)."""
        return {
            p.name
            for p in inspect.signature(self.function).parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }

    def __call__(self, arguments: dict, count: int, where: str) -> list[float]:
        """Its reward of each of ``count`` completions (None as NaN); a failure names it and ``where`` (the step)."""
        wants = self.wants()
        given = arguments if wants is None else {k: v for k, v in arguments.items() if k in wants}
        try:
            values = self.function(**given)
        except Exception as err:
            log.exception("task.rewards: %s raised %s", self.name, where)
            raise RewardError(f"task.rewards: {self.name} raised {where}: {type(err).__name__}: {err}") from err
        return _as_floats(values, count, self.name, where)


def _as_floats(values, count: int, name: str, where: str) -> list[float]:
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    try:
        values = list(values)
    except TypeError:
        raise RewardError(
            f"task.rewards: {name} returned {type(values).__name__} {where}; a reward function returns "
            f"a list of {count} floats (or None), one per completion"
        ) from None
    if len(values) != count:
        raise RewardError(
            f"task.rewards: {name} returned {len(values)} rewards {where} for {count} completions; a reward "
            "function returns one per completion"
        )
    try:
        return [math.nan if v is None else float(v) for v in values]
    except (TypeError, ValueError):
        bad = next(v for v in values if v is not None and not isinstance(v, (int, float)))
        raise RewardError(f"task.rewards: {name} returned {bad!r} {where}; a reward is a float or None") from None


class Rewards:
    """The functions of ``task.rewards``, scoring a batch of completions together."""

    def __init__(self, entries: Sequence):
        self.functions = [RewardFunction.of(entry) for entry in entries]
        self.weights = torch.tensor([f.weight for f in self.functions], dtype=torch.float32)
        self.metrics: dict[str, list[float]] = {}  # what the functions logged (log_metric), since the last read

    @classmethod
    def problems(cls, entries) -> list[str]:
        """Why ``task.rewards`` would not score (keyed relative to the task): an entry that is not a path or
        ``{function, weight, ...}``, a function that does not import, a weight that is not a number, options
        the function does not take."""
        if not isinstance(entries, (list, tuple)) or not entries:
            return [
                "rewards: a list of reward functions is needed, each an import path or {function: <path>, "
                f"weight: <w>}} (e.g. [framework.tasks.rewards.accuracy]); got {entries!r}"
            ]
        return [p for i, entry in enumerate(entries) for p in _entry_problems(f"rewards[{i}]", entry)]

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    def score(
        self, prompts: list, completions: list, completion_ids: list, columns: dict, state: dict, where: str
    ) -> torch.Tensor:
        """Every function's reward of each completion [completions, functions] (NaN: None). ``columns``: the
        prompt rows' other fields, one value per completion; ``state``: global_step, epoch; ``where``: the
        step (or the held-out pass) a failure names."""
        arguments = {
            "prompts": prompts,
            "completions": completions,
            "completion_ids": completion_ids,
            **columns,
            "trainer_state": SimpleNamespace(**state),
            "log_extra": lambda column, values: None,  # (TRL's completions table: not kept here)
            "log_metric": lambda name, value: self.metrics.setdefault(name, []).append(float(value)),
        }
        scored = [f(arguments, len(completions), where) for f in self.functions]
        return torch.tensor(scored, dtype=torch.float32).T.reshape(len(completions), len(self.functions))


def _entry_problems(key: str, entry) -> list[str]:
    if isinstance(entry, str):
        entry = {"function": entry}
    if not isinstance(entry, dict) or not isinstance(entry.get("function"), str):
        return [f"{key}: expected an import path or {{function: <path>, weight: <w>, ...}}, got {entry!r}"]
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        return [f"{key}.weight: expected a number, got {weight!r}"]
    try:
        function = import_target(entry["function"])
    except (ImportError, AttributeError) as err:
        return [f"{key}: {entry['function']!r} does not import ({err})"]
    if not callable(function):
        return [f"{key}: {entry['function']!r} is {type(function).__name__}, not a function"]
    options = {k: v for k, v in entry.items() if k not in ("function", "weight")}
    try:
        parameters = inspect.signature(function).parameters
    except ValueError:  # (a builtin without a signature: nothing to check)
        return []
    named = [n for n, p in parameters.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n not in PASSED]
    return [
        f"{key}.{option}: {entry['function']} takes no option {option} (its own: {', '.join(named) or 'none'})"
        for option in options
        if option not in named
    ]
