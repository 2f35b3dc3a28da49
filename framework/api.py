"""The Python API, for notebooks and tests: ``cfg = compose([...]); results = fit(cfg)``."""
from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path
from typing import Iterable, Optional

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig, open_dict

from framework.config.overrides import lenient
from framework.job import run_job, set_job_fields

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def compose(overrides: Iterable[str] = (), config_dir: Optional[str] = None, config_name: str = "train") -> DictConfig:
    """Compose ``conf/train.yaml`` (or ``config_dir``/``config_name``) with command-line style overrides.

    Raises Hydra's error for an unknown group option (it lists the valid options).
    """
    with initialize_config_dir(version_base="1.3", config_dir=str(Path(config_dir or CONF_DIR).resolve()),
                               job_name="framework"):
        cfg = hydra_compose(config_name, overrides=lenient(list(overrides)), return_hydra_config=True)
    experiment = cfg.hydra.runtime.choices.get("experiment")
    with open_dict(cfg):
        del cfg["hydra"]
        if cfg.get("name") is None:
            cfg.name = experiment or "custom"
    return cfg


def fit(cfg: DictConfig, output_dir: Optional[str] = None) -> dict:
    """Validate and run ``cfg``; returns the contents of results.json.

    ``output_dir`` defaults to ``outputs/api/<date>/<time>``. Raises ConfigError before
    anything is written (but train.log) when the config is invalid.
    """
    cfg = cfg.copy()
    if output_dir is None:
        output_dir = cfg.get("output_dir") or str(
            Path("outputs/api") / _dt.datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f"))
    set_job_fields(cfg, output_dir, None)
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(Path(output_dir) / "train.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    previous_level = root.level
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    try:
        return run_job(cfg)
    finally:
        root.removeHandler(handler)
        root.setLevel(previous_level)
        handler.close()
