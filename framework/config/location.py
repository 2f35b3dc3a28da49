"""Where the framework's config groups live: the package ``framework.conf``.

In the source tree that package is ``conf/`` (pyproject.toml maps it, and ``experiments/``
as its ``experiment`` group); in an installed wheel it is ``framework/conf/``. Hydra reads
it as ``pkg://framework.conf`` either way, so no entry point depends on the working directory.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Iterable

CONFIG_PACKAGE = "framework.conf"
HYDRA_CONFIG_PATH = f"pkg://{CONFIG_PACKAGE}"


def config_dir() -> Path:
    """The directory of ``framework.conf`` (a real directory: installs are never zipped)."""
    return Path(str(importlib.resources.files(CONFIG_PACKAGE)))


def group_names(extra_dirs: Iterable[str] = ()) -> set[str]:
    """The config groups of ``framework.conf`` and of the user's config directories."""
    names = set()
    for directory in (config_dir(), *map(Path, extra_dirs)):
        if directory.is_dir():
            names |= {p.name for p in directory.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    return names


def group_options(group: str, extra_dirs: Iterable[str] = ()) -> set[str]:
    """The options of config group ``group`` (``strategy`` -> ddp, fsdp, pp/fsdp, ...) in
    ``framework.conf`` and the user's config directories."""
    options = set()
    for directory in (config_dir(), *map(Path, extra_dirs)):
        folder = directory / group
        if folder.is_dir():
            options |= {p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml")}
    return options
