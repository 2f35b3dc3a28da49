"""The primary config that evaluates (or predicts with) a run's checkpoint: the run's saved ``config.yaml``,
less the groups that the command line selects again (they come back from their files, so
``strategy=ddp`` replaces the saved strategy whole instead of merging into it)."""
from __future__ import annotations

import re
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.location import HYDRA_CONFIG_PATH, group_names
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
    saved = run_dir / "config.yaml"
    if not Path(ckpt_path).exists():
        raise ConfigError([f"ckpt_path: nothing at '{ckpt_path}'"])
    if not saved.is_file():
        raise ConfigError([f"ckpt_path: no run config at '{saved}' (expected <run dir>/checkpoints/<checkpoint>)"])
    container = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    searchpath = [HYDRA_CONFIG_PATH, *_saved_searchpath(run_dir)]
    groups = group_names([p.removeprefix("file://") for p in searchpath[1:] if not p.startswith("pkg://")]
                         + user_config_dirs(overrides))
    args = []
    for override in overrides:
        match = _SELECTION.match(override)
        if match and match.group(1) in groups:
            container.pop(match.group(1), None)
            args.append(f"+{override}")
        elif override.startswith("output_dir="):  # the spelling of earlier versions
            args.append(f"hydra.run.dir={override.split('=', 1)[1]}")
        else:
            args.append(override)
    container.update(**MODES[mode], ckpt_path=str(Path(ckpt_path).resolve()), output_dir=None, overwrite=False)
    stamp = "${now:%Y-%m-%d_%H-%M-%S}"
    primary = {"defaults": [{"hydra": "default"}, "_self_"], **container, "hydra": {
        "searchpath": searchpath, "run": {"dir": f"{run_dir}/{mode}/{stamp}"},
        "sweep": {"dir": f"{run_dir}/{mode}/multirun/{stamp}", "subdir": "${hydra.job.num}"}}}
    directory = tempfile.mkdtemp(prefix="framework-evaluate-")
    OmegaConf.save(OmegaConf.create(primary), Path(directory) / f"{EVALUATE_CONFIG}.yaml")
    return directory, args


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
