"""The primary config that evaluates (or predicts with) a run's checkpoint: the run's saved ``config.yaml``,
less the groups that the command line selects again (they come back from their files, so
``strategy=ddp`` replaces the saved strategy whole instead of merging into it)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.group_choices import selections
from framework.config.location import HYDRA_CONFIG_PATH, config_dir, group_names
from framework.config.overrides import user_config_dirs
from framework.config.relocate import relocate

EVALUATE_CONFIG = "evaluate_run"
# What each entry point runs on the checkpoint, and the directory of the run it writes under.
MODES = {"eval": {"train": False, "test": True}, "predict": {"train": False, "test": False, "predict": True}}
_SELECTION = re.compile(r"^([A-Za-z_][\w\-]*)(@[\w.]+)?=")


def run_dir_of(ckpt_path: str) -> Path:
    """``<run dir>`` of ``<run dir>/checkpoints/<checkpoint>``."""
    return Path(ckpt_path).resolve().parent.parent


def saved_run_config(ckpt_path: str, overrides: list[str], mode: str = "eval") -> tuple[str, list[str]]:
    """Write the primary config for testing (``mode`` "eval") or predicting with ("predict")
    ``ckpt_path`` to a new temporary directory (the caller removes it); returns that directory
    and the overrides to compose it with."""
    run_dir = run_dir_of(ckpt_path)
    if not Path(ckpt_path).exists():
        raise ConfigError([f"ckpt_path: nothing at '{ckpt_path}'"])
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError(
            [f"ckpt_path: no run config at '{run_dir / 'config.yaml'}' (expected <run dir>/checkpoints/<checkpoint>)"]
        )
    stamp = "${now:%Y-%m-%d_%H-%M-%S}"
    return _primary_config(
        run_dir,
        overrides,
        {**MODES[mode], "ckpt_path": str(Path(ckpt_path).resolve())},
        {
            "run": {"dir": f"{run_dir}/{mode}/{stamp}"},
            "sweep": {"dir": f"{run_dir}/{mode}/multirun/{stamp}", "subdir": "${hydra.job.num}"},
        },
    )


def resume_run_config(run_dir: Path, ckpt_path: str, overrides: list[str]) -> tuple[str, list[str]]:
    """The primary config that resumes the run in ``run_dir`` from ``ckpt_path`` (``last``, ``best``
    or one of its checkpoints) in that same directory: the run's saved config, the command line on
    top (as framework.evaluate's); written and returned as ``saved_run_config``'s. A run directory that
    was moved since keeps its paths (checkpoints, loggers) with it."""
    return _primary_config(
        run_dir,
        overrides,
        {"ckpt_path": ckpt_path},
        {"run": {"dir": str(run_dir)}},
        moved_to=str(Path(run_dir).resolve()),
    )


def _primary_config(
    run_dir: Path, overrides: list[str], updates: dict, hydra_dirs: dict, moved_to: str | None = None
) -> tuple[str, list[str]]:
    """``run_dir``'s config.yaml with ``updates`` as a primary config in a new temporary directory,
    Hydra's run and sweep directories ``hydra_dirs``; and the overrides to compose it with (a
    group the command line selects again is dropped from the saved config and comes back whole).
    ``moved_to``: the saved run directory's paths are moved there."""
    container = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=False)
    saved_dir = container.get("output_dir")
    if moved_to and isinstance(saved_dir, str) and saved_dir != moved_to:
        container = relocate(container, saved_dir, moved_to)
    searchpath = [HYDRA_CONFIG_PATH, *_saved_searchpath(run_dir)]
    groups = group_names(
        [p.removeprefix("file://") for p in searchpath[1:] if not p.startswith("pkg://")] + user_config_dirs(overrides)
    )
    args = []
    for override in overrides:
        removed = override[1:].split("=", 1)[0] if override.startswith("~") else None
        if removed and not _has(container, removed.split(".")):
            continue  # deleted in the saved run already (its own command line, repeated on resume)
        if removed in groups:  # a group is a key of the saved config, not a selection Hydra could remove
            container.pop(removed)
            continue
        match = _SELECTION.match(override)
        if match and match.group(1) in groups:
            container.pop(match.group(1), None)
            args.append(f"+{override}")
        elif override.startswith("output_dir="):  # the spelling of earlier versions
            args.append(f"hydra.run.dir={override.split('=', 1)[1]}")
        else:
            args.append(override)
    container.update(**updates, output_dir=None, overwrite=False, attempt=None)
    primary = {
        "defaults": [{"hydra": "default"}, "_self_"],
        **container,
        "hydra": {"searchpath": searchpath, **hydra_dirs},
    }
    directory = tempfile.mkdtemp(prefix="framework-saved-run-")
    OmegaConf.save(OmegaConf.create(primary), Path(directory) / f"{EVALUATE_CONFIG}.yaml")
    return directory, args


def _has(node: Any, path: list[str]) -> bool:
    """Whether ``node`` holds the key at ``path`` (``["callbacks", "early_stopping"]``)."""
    return not path or (isinstance(node, dict) and path[0] in node and _has(node[path[0]], path[1:]))


def _saved_searchpath(run_dir: Path) -> list[str]:
    """The user's config directories the run was composed with (its .hydra/hydra.yaml)."""
    hydra_yaml = run_dir / ".hydra" / "hydra.yaml"
    if not hydra_yaml.is_file():
        return []
    saved = OmegaConf.select(OmegaConf.load(hydra_yaml), "hydra.searchpath", default=None) or []
    return [str(p) for p in saved if str(p) != HYDRA_CONFIG_PATH]


def evaluation_config(cfg: DictConfig, output_dir: str) -> DictConfig:
    """The saved config's paths under the run dir (loggers, checkpoints) moved to ``output_dir``."""
    container = relocate(OmegaConf.to_container(cfg, resolve=False), str(run_dir_of(cfg.ckpt_path)), output_dir)
    return OmegaConf.create({**container, "ckpt_path": cfg.ckpt_path, "output_dir": output_dir})


def resumed_run_dir(args: list[str]) -> Path | None:
    """The run directory that ``args`` resume in place with its saved config: ``hydra.run.dir=<dir>``
    that holds a run's config.yaml, with a ``ckpt_path`` inside it (``last``, ``best``, a checkpoint's
    name or path). Not when the command line selects a whole composition (``experiment=...``, any
    ``@package _global_`` option): a requeued job repeats its command line and composes as it did."""
    values = {a.lstrip("+").split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}
    run_dir, ckpt = values.get("hydra.run.dir"), values.get("ckpt_path")
    if (
        not run_dir
        or not ckpt
        or ckpt == "null"
        or not (Path(run_dir) / "config.yaml").is_file()
        or _selects_a_composition(args)
    ):
        return None
    if "/" not in ckpt:  # last, best, or a checkpoint's name: in this run's checkpoints/
        return Path(run_dir)
    inside = Path(run_dir).resolve() in Path(ckpt).resolve().parents
    return Path(run_dir) if inside else None


def _selects_a_composition(args: list[str]) -> bool:
    """Whether ``args`` select an option that sets the whole config (``# @package _global_``: an
    experiment, a debug mode, a search), which only a full composition can apply."""
    dirs = [config_dir(), *map(Path, user_config_dirs(args))]
    files = [d / group / f"{option}.yaml" for group, option in selections(args) for d in dirs]
    return any(f.is_file() and "@package _global_" in f.read_text()[:200] for f in files)
