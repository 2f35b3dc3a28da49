"""The Python API, for notebooks, scripts and tests: ``cfg = compose([...]); results = fit(cfg)``."""
from __future__ import annotations

import datetime as _dt
import logging
import sys
from pathlib import Path
from typing import Iterable, Optional

from hydra import compose as hydra_compose
from hydra import initialize_config_dir, initialize_config_module
from omegaconf import DictConfig, open_dict

from framework.config import ConfigError
from framework.config.location import CONFIG_PACKAGE
from framework.config.overrides import lenient
from framework.job import fill_name, run_job, set_job_fields
from framework.launch.main_module import GUARD_MESSAGE, reimported_by_a_rank

# What the command line's hints say, in the API's words.
_API_SPELLING = {"(hydra.run.dir=...)": "(fit(cfg, output_dir=...))", "set overwrite=true": "pass overwrite=True"}


def compose(overrides: Iterable[str] = (), config_dir: Optional[str] = None, config_name: str = "train") -> DictConfig:
    """Compose the framework's ``train`` config (or ``config_dir``/``config_name``, your own
    primary config, which may add the framework's groups with ``hydra.searchpath``) with
    command-line style overrides. Raises Hydra's error for an unknown group option (it lists
    the valid options)."""
    overrides = list(overrides)
    if config_dir:
        init = initialize_config_dir(version_base="1.3", config_dir=str(Path(config_dir).resolve()),
                                     job_name="framework")
    else:
        init = initialize_config_module(CONFIG_PACKAGE, version_base="1.3", job_name="framework")
    with init:
        cfg = hydra_compose(config_name, overrides=lenient(overrides), return_hydra_config=True)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    fill_name(cfg, choices, overrides)
    return cfg


def fit(cfg: DictConfig, output_dir: Optional[str] = None, overwrite: bool = False) -> dict:
    """Validate and run ``cfg``; returns the contents of results.json.

    ``output_dir`` defaults to ``outputs/api/<date>/<time>``; a directory that holds a run
    already is refused unless ``overwrite=True`` (or the run resumes it, ``ckpt_path=last``).
    Raises ConfigError before anything is written (but train.log) when the config is invalid.
    """
    caller = sys._getframe(1).f_globals
    if reimported_by_a_rank(caller):
        message = GUARD_MESSAGE.format(script=caller.get("__file__"))
        print(message, file=sys.stderr)  # a rank's start-up error would not show it otherwise
        raise RuntimeError(message)
    cfg = cfg.copy()
    output_dir = str(output_dir or cfg.get("output_dir") or
                     Path("outputs/api") / _dt.datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f"))
    set_job_fields(cfg, output_dir)
    if overwrite:
        with open_dict(cfg):
            cfg.overwrite = True
    with _log_to(Path(output_dir) / "train.log"):
        try:
            return run_job(cfg)
        except ConfigError as err:
            raise ConfigError([_in_api_words(p) for p in err.problems]) from None


def _in_api_words(problem: str) -> str:
    for cli, api in _API_SPELLING.items():
        problem = problem.replace(cli, api)
    return problem


class _log_to:
    """The run's train.log, as the command line writes it, for the duration of one fit."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = logging.FileHandler(path)
        self.handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))

    def __enter__(self):
        root = logging.getLogger()
        root.addHandler(self.handler)
        self.previous_level = root.level
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)

    def __exit__(self, *exc):
        root = logging.getLogger()
        root.removeHandler(self.handler)
        root.setLevel(self.previous_level)
        self.handler.close()
