"""Composing the framework's config with command-line style overrides, outside a Hydra app (the
Python API, ``framework-plan``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

from hydra import compose as hydra_compose
from hydra import initialize_config_dir, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import DictConfig, open_dict

from framework.config.location import CONFIG_PACKAGE
from framework.config.overrides import lenient
from framework.job.naming import set_job_fields


def compose(overrides: Iterable[str] = (), config_dir: Optional[str] = None, config_name: str = "train") -> DictConfig:
    """Compose the framework's ``train`` config (or ``config_dir``/``config_name``, your own
    primary config, which may add the framework's groups with ``hydra.searchpath``) with
    command-line style overrides. Raises Hydra's error for an unknown group option (it lists
    the valid options)."""
    overrides = list(overrides)
    if config_dir:
        init = initialize_config_dir(
            version_base="1.3", config_dir=str(Path(config_dir).resolve()), job_name="framework"
        )
    else:
        init = initialize_config_module(CONFIG_PACKAGE, version_base="1.3", job_name="framework")
    with init:
        try:
            cfg = hydra_compose(config_name, overrides=lenient(overrides), return_hydra_config=True)
        except ConfigCompositionException as err:
            if err.__cause__ is None:
                raise
            # why, as the command line prints it (its first line: OmegaConf's key and type follow)
            raise ConfigCompositionException(f"{err}: {str(err.__cause__).splitlines()[0]}") from err.__cause__
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    set_job_fields(cfg, None, choices, overrides)
    return cfg
