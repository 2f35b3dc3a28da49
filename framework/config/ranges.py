"""The valid values of a number, declared beside its default: ``ranged(default, low=1)`` in a
schema dataclass (field metadata), or an entry of ``COMPONENT_RANGES`` for the arguments of
components (any class) that every run depends on. ``check_schema`` applies them; the messages
name the key, the range and the value."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def are_ints(*values: Any) -> bool:
    """Whether every value is an int (not a bool)."""
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


@dataclass(frozen=True)
class Range:
    """``low`` (inclusive, exclusive when ``strict``); ``unlimited``: -1 means no limit too;
    ``fraction``: a float is a fraction in [0, 1] and an int a count >= 0; ``what``: the words
    for the value in the message; ``note``: what 0 or null mean (with ``unlimited``: what -1 means);
    ``message``: a message of its own (``{key}``, ``{value}``). Non-finite floats are refused."""

    low: Optional[float] = None
    strict: bool = False
    unlimited: bool = False
    fraction: bool = False
    what: str = ""
    note: str = ""
    message: str = ""
    high: Optional[float] = None  # excluded when ``high_strict``
    high_strict: bool = False
    length: Optional[int] = None  # a list of exactly this many numbers, each in the range
    each: bool = False  # a list of any length, each entry in the range

    def problems(self, key: str, value: Any) -> list[str]:
        if self.length is not None:
            return self._sequence_problems(key, value)
        if self.each:
            bad = (
                [v for v in value if is_number(v) and Range(self.low, self.strict).problems(key, v)]
                if isinstance(value, (list, tuple))
                else []
            )
            return (
                [f"{key}: every entry must be {'>' if self.strict else '>='} {self.low}, got {list(value)}"]
                if bad
                else []
            )
        if not is_number(value):
            return []
        if self.high is not None:
            return [] if self._within(value) else [f"{key}: must be in {self._interval()}, got {value}"]
        if not math.isfinite(value):
            return [f"{key}: must be a finite number, got {value}"]
        if self.fraction:
            if isinstance(value, float) and not 0.0 <= value <= 1.0:
                return [f"{key}: a float is a fraction in [0, 1], got {value}; use an int for a count"]
            return [f"{key}: must be >= 0, got {value}"] if isinstance(value, int) and value < 0 else []
        if self.low is None or (self.unlimited and value == -1):
            return []
        if value > self.low or (value == self.low and not self.strict):
            return []
        if self.message:
            return [self.message.format(key=key, value=value)]
        if self.unlimited:
            meaning = f"for {self.note}" if self.note else "(or null) for no limit"
            return [f"{key}: must be >= {self.low}, or -1 {meaning}; got {value}"]
        subject = f"{self.what} must be" if self.what else "must be"
        return [f"{key}: {subject} {'>' if self.strict else '>='} {self.low}{self.note}, got {value}"]

    def describe(self) -> str:
        """The valid values in words, for the config reference (docs/reference/config.md)."""
        if self.length is not None:
            return f"{self.length} numbers in {self._interval()}"
        if self.fraction:
            return "a float in [0, 1] (a fraction) or an int >= 0 (a count)"
        if self.high is not None:
            return f"in {self._interval()}"
        if self.low is None:
            return ""
        bound = f"{'>' if self.strict else '>='} {self.low}"
        unlimited = f", or -1 ({self.note})" if self.note else ", or -1 for no limit"
        return (f"every entry {bound}" if self.each else bound) + (unlimited if self.unlimited else "")

    def _within(self, value) -> bool:
        above = self.low is None or value > self.low or (value == self.low and not self.strict)
        below = self.high is None or value < self.high or (value == self.high and not self.high_strict)
        return math.isfinite(value) and above and below

    def _interval(self) -> str:
        return f"{'(' if self.strict else '['}{self.low}, {self.high}{')' if self.high_strict else ']'}"

    def _sequence_problems(self, key: str, value: Any) -> list[str]:
        if value is None:
            return []
        good = (
            isinstance(value, (list, tuple))
            and len(value) == self.length
            and all(is_number(v) and self._within(v) for v in value)
        )
        return [] if good else [f"{key}: expected {self.length} numbers in {self._interval()}, got {value!r}"]


@dataclass(frozen=True)
class ArgumentRanges:
    """The ranges a class declares for its constructor's arguments (its ``argument_ranges``:
    {argument: Range}), applied by the config validation and by a class built in Python."""

    ranges: dict

    @classmethod
    def of(cls, owner: Any) -> "ArgumentRanges":
        return cls(getattr(owner, "argument_ranges", None) or {})

    def problems(self, values: dict, prefix: str) -> list[str]:
        """What the ranges say of ``values`` (the constructor's keys), each key after ``prefix``."""
        return [
            p
            for key, valid in self.ranges.items()
            if key in values
            for p in valid.problems(f"{prefix}{key}", values[key])
        ]

    def check(self, values: dict, key: str) -> None:
        """Raise ValueError when ``values`` are outside the ranges (for a class built in Python,
        which no config validation saw)."""
        problems = self.problems(values, f"{key}.")
        if problems:
            raise ValueError("; ".join(problems))


def ranged(default: Any = None, *, default_factory=None, **bounds) -> Any:
    """A dataclass field with its ``Range`` (``bounds``: Range's arguments) in its metadata."""
    metadata = {"range": Range(**bounds)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def range_of(schema_field) -> Optional[Range]:
    return schema_field.metadata.get("range")


# Arguments of the components a run is built from (whatever class is configured) that the
# framework relies on: a bad one would only fail after the ranks started.
# The same names mean the same in every torch optimizer and scheduler, so they are checked
# whichever class is configured; a class of its own declares ``argument_ranges``.
UNIT = Range(low=0, high=1, high_strict=True)  # [0, 1)
COMPONENT_RANGES: dict[str, dict[str, Range]] = {
    "datamodule": {"batch_size": Range(low=0, strict=True, what="the global batch size"), "num_workers": Range(low=0)},
    "model": {"dropout": UNIT},
    "optimizer": {
        "lr": Range(low=0, strict=True, what="the learning rate"),
        "weight_decay": Range(low=0),
        "momentum": Range(low=0),
        "eps": Range(low=0, strict=True),
        "betas": Range(low=0, high=1, high_strict=True, length=2),
    },
    "scheduler": {
        "step_size": Range(low=1),
        "T_max": Range(low=1),
        "total_steps": Range(low=1),
        "gamma": Range(low=0, strict=True),
        "max_lr": Range(low=0, strict=True),
        "pct_start": Range(low=0, high=1, strict=True, high_strict=True),
    },
}
