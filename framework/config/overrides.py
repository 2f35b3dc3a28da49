"""Command-line overrides, made lenient so that our validator sees every mistake at once.

Hydra rejects ``trainer.max_epoch=3`` (a typo) at composition with "Key 'max_epoch' is
not in struct", one key at a time and without a suggestion. Rewriting plain dotted
overrides to Hydra's force-add form (``++trainer.max_epoch=3``) lets the value reach
``validate``, which reports it with the closest valid key, together with every other
problem. A top-level typo (``sed=1`` for ``seed``) is rewritten the same way when it is
close to a framework key and is not a config group. Group selections (``model=mlp``,
``hydra/launcher=joblib``), ``hydra.*`` keys, flags and overrides that already carry
``+``, ``++`` or ``~`` are left as they are.
"""

from __future__ import annotations

import difflib
import functools
import re
from typing import Callable

from framework.config.group_keys import group_keys
from framework.config.location import group_names
from framework.config.schemas import ROOT_KEYS, TYPO_CUTOFF

_PLAIN_DOTTED = re.compile(r"^(?![+~])(?!hydra\.)[A-Za-z_][\w\-]*(\.[\w\-]+)+=")
_PLAIN_TOP = re.compile(r"^([A-Za-z_][\w\-]*)=")


def lenient(overrides: list[str]) -> list[str]:
    config_dirs = user_config_dirs(overrides)
    groups = group_names(config_dirs)
    ours = functools.cache(lambda: group_keys(config_dirs))  # read from the YAML files once, if at all
    return [f"++{o}" if _PLAIN_DOTTED.match(o) or _top_level_typo(o, groups, ours) else o for o in overrides]


def _top_level_typo(override: str, groups: set[str], ours: Callable[[], dict]) -> bool:
    """A plain ``key=value`` at the top that is close to a key of ours or is ours under a group
    (``tokenizer=x`` for ``datamodule.tokenizer``): for the validator to name, not Hydra."""
    match = _PLAIN_TOP.match(override)
    if not match or match.group(1) in groups or match.group(1) in ROOT_KEYS or match.group(1) == "hydra":
        return False
    key = match.group(1)
    return bool(difflib.get_close_matches(key, ROOT_KEYS | groups, n=1, cutoff=TYPO_CUTOFF)) or key in ours()


def user_config_dirs(args: list[str]) -> list[str]:
    """Config directories the command line adds: ``--config-dir``/``-cd`` and the file
    entries of ``hydra.searchpath=[...]`` (their groups merge with the framework's)."""
    dirs = []
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(args[i + 1])
        elif arg.startswith("--config-dir="):
            dirs.append(arg.split("=", 1)[1])
        elif arg.lstrip("+").startswith("hydra.searchpath="):
            entries = arg.split("=", 1)[1].strip("[]").split(",")
            dirs += [e.strip().removeprefix("file://") for e in entries if not e.strip().startswith("pkg://")]
    return dirs
