"""Group selections on the command line (``strategy=tpp``) checked before Hydra composes: an
option that does not exist is named with the closest one and the valid choices, as a misspelled
key is, instead of Hydra's bare "Could not find"."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import yaml

from framework.config.location import group_names, group_options
from framework.config.overrides import user_config_dirs

_SELECTION = re.compile(r"^\+?([A-Za-z_][\w\-]*(?:/[\w\-]+)*)(@[\w.]+)?=(.*)$")


def selections(args: list[str]) -> list[tuple[str, str]]:
    """(group, option) of each option a ``group=option`` of the command line selects (a list or a
    sweep: each of its options); sweep functions, interpolations and ``null`` are left out."""
    found = []
    for match in filter(None, map(_SELECTION.match, args)):
        value = match.group(3)
        if not any(c in value for c in "()$"):
            found += [
                (match.group(1), choice)
                for choice in (v.strip().strip("'\"") for v in value.strip("[]").split(","))
                if choice and choice != "null"
            ]
    return found


def unknown_options(args: list[str]) -> list[str]:
    """A problem per selected option that is not in its group (groups of Hydra's own are left to Hydra)."""
    dirs = user_config_dirs(args) + _primary_searchpath(args)
    groups = group_names(dirs)
    problems = []
    for group, choice in selections(args):
        if group.split("/")[0] not in groups or group.startswith("hydra"):
            continue
        options = group_options(group, dirs)
        if options and choice not in options:  # (no options: a key of a group node, callbacks.x=..., not a selection)
            problems.append(_message(group, choice, options))
    return problems


def null_selections(args: list[str]) -> list[str]:
    """``group=null`` (Hydra's message is a traceback): a selection is removed with ``~group``."""
    groups = group_names(user_config_dirs(args) + _primary_searchpath(args))
    nulls = [m.group(1) for m in filter(None, map(_SELECTION.match, args)) if m.group(3) == "null"]
    return [
        f"{group}: '{group}=null' selects nothing on the command line; '~{group}' removes the selection"
        for group in nulls
        if group.split("/")[0] in groups and not group.startswith("hydra")
    ]


def _primary_searchpath(args: list[str]) -> list[str]:
    """The file:// entries of ``hydra.searchpath`` in the primary config that ``--config-dir`` and
    ``--config-name`` name (framework.evaluate's, a resume's, the user's own)."""
    dirs, name = user_config_dirs(args), None
    for i, arg in enumerate(args):
        if arg in ("--config-name", "-cn") and i + 1 < len(args):
            name = args[i + 1]
        elif arg.startswith("--config-name="):
            name = arg.split("=", 1)[1]
    found = []
    for directory in dirs if name else ():
        path = Path(directory) / f"{name.removesuffix('.yaml')}.yaml"
        try:
            node = yaml.safe_load(path.read_text()) if path.is_file() else None
        except (OSError, yaml.YAMLError):
            node = None
        entries = ((node or {}).get("hydra") or {}).get("searchpath") or [] if isinstance(node, dict) else []
        found += [str(e).removeprefix("file://") for e in entries if not str(e).startswith("pkg://")]
    return found


def _message(group: str, choice: str, options: set[str]) -> str:
    close = difflib.get_close_matches(choice, sorted(options), n=1, cutoff=0.6)
    hint = f"; did you mean '{group}={close[0]}'?" if close else ""
    own = (
        ""
        if close
        else f"; an option of your own is <your configs>/{group}/{choice}.yaml, found with "
        "hydra.searchpath=[file:///abs/path/to/your/configs]"
    )
    return f"{group}: no option '{choice}'{hint} (options: {', '.join(sorted(options))}){own}"
