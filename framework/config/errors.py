"""The one error type for a bad configuration: it carries every problem found."""

from __future__ import annotations


class ConfigError(ValueError):
    """Raised before any process starts; ``problems`` lists every issue, one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"Invalid configuration ({count} problem{'s' if count != 1 else ''}):\n{lines}")
