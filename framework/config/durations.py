"""``trainer.max_time`` as Lightning takes it: "DD:HH:MM:SS" or {days, hours, minutes, seconds}."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_UNITS = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1}
_FORMAT = 'expected "DD:HH:MM:SS" (e.g. "00:12:00:00") or {days, hours, minutes, seconds}'


def parse_duration(value: Any) -> float:
    """Seconds; ValueError naming the accepted forms."""
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) != 4 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"{_FORMAT}, got {value!r}")
        days, hours, minutes, seconds = (int(p) for p in parts)
        return float(days * 86400 + hours * 3600 + minutes * 60 + seconds)
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(_UNITS))
        if unknown or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value.values()
        ):
            raise ValueError(f"{_FORMAT} with numbers >= 0, got {value!r}")
        return float(sum(_UNITS[k] * v for k, v in value.items()))
    raise ValueError(f"{_FORMAT}, got {value!r}")


@dataclass(frozen=True)
class Duration:
    """A ``trainer.max_time`` value, parsed: Lightning's Timer takes it as seconds."""

    seconds: float

    @classmethod
    def parse(cls, value: Any) -> "Duration":
        return cls(parse_duration(value))

    @classmethod
    def problems(cls, value: Any) -> list[str]:
        """Why ``value`` (null: no limit) is not a duration to train for."""
        if value is None:
            return []
        try:
            seconds = cls.parse(value).seconds
        except ValueError as err:
            return [f"trainer.max_time: {err}"]
        return [] if seconds > 0 else [f"trainer.max_time: must be longer than 0 s, got {value!r}"]
