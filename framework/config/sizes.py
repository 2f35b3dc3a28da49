"""``trainer.memory_limit``: bytes as an int, or a number with a unit ("512MiB", "2GB", "1.5 GiB")."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_FORMAT = 'expected bytes (an int) or a number with a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. "2GiB")'


def parse_bytes(value: Any) -> int:
    """Bytes; ValueError naming the accepted forms."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = value, ""
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", value) if isinstance(value, str) else None
        if match is None or match.group(2).lower() not in _UNITS:
            raise ValueError(f"{_FORMAT}, got {value!r}")
        number, unit = float(match.group(1)), match.group(2).lower()
    if number <= 0:
        raise ValueError(f"must be more than 0 bytes, got {value!r}")
    return int(number * _UNITS[unit])


@dataclass(frozen=True)
class Size:
    """A size in bytes given in a config (``trainer.memory_limit``), parsed."""

    bytes: int

    @classmethod
    def parse(cls, value: Any) -> "Size":
        return cls(parse_bytes(value))

    @classmethod
    def problems(cls, key: str, value: Any) -> list[str]:
        """Why ``value`` at config ``key`` (null: none given) is not a size."""
        if value is None:
            return []
        try:
            cls.parse(value)
        except ValueError as err:
            return [f"{key}: {err}"]
        return []
