"""The error types the user is told about without a traceback: a bad configuration (every problem
found at once) and a damaged input file."""

from __future__ import annotations


class ConfigError(ValueError):
    """Raised before any process starts; ``problems`` lists every issue, one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        count = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"Invalid configuration ({count} problem{'s' if count != 1 else ''}):\n{lines}")


class InputError(ValueError):
    """An input file that cannot be used as it is (a shard or a checkpoint damaged since it was
    written): its message names the file and says what to do. Found where the file is read, inside a
    rank as before start, and said in a few lines, never under a traceback."""
