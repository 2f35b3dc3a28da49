"""A newcomer's environment without an extra: the top-level modules named in ``$FRAMEWORK_HIDDEN_MODULES``
(comma-separated) are not found, as in a venv that never installed them (``find_spec`` gives None and
``import`` raises ModuleNotFoundError), while the rest of this environment stays (no venv to build per
test). Python imports this file at start up where its folder is on PYTHONPATH (tests/helpers/without.py)."""

import importlib.machinery
import os
import sys

HIDDEN = set(filter(None, os.environ.get("FRAMEWORK_HIDDEN_MODULES", "").split(",")))


class HidingPathFinder(importlib.machinery.PathFinder):
    """The path finder of every installed package, blind to the hidden ones."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [HidingPathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
