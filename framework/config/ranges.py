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


@dataclass(frozen=True)
class Range:
    """``low`` (inclusive, exclusive when ``strict``); ``unlimited``: -1 means no limit too;
    ``fraction``: a float is a fraction in [0, 1] and an int a count >= 0; ``what``: the words
    for the value in the message; ``note``: what 0 or null mean; ``message``: a message of its own
    (``{key}``, ``{value}``). Non-finite floats are refused."""

    low: Optional[float] = None
    strict: bool = False
    unlimited: bool = False
    fraction: bool = False
    what: str = ""
    note: str = ""
    message: str = ""

    def problems(self, key: str, value: Any) -> list[str]:
        if not is_number(value):
            return []
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
            return [f"{key}: must be >= {self.low}, or -1 (or null) for no limit; got {value}"]
        subject = f"{self.what} must be" if self.what else "must be"
        return [f"{key}: {subject} {'>' if self.strict else '>='} {self.low}{self.note}, got {value}"]


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
COMPONENT_RANGES: dict[str, dict[str, Range]] = {
    "datamodule": {"batch_size": Range(low=0, strict=True, what="the global batch size"),
                   "num_workers": Range(low=0)},
    "optimizer": {"lr": Range(low=0, strict=True, what="the learning rate")},
}
