"""A job's name and output directory, filled into its config before validation."""

from __future__ import annotations

from typing import Iterable, Mapping

from omegaconf import DictConfig, OmegaConf, open_dict


def set_job_fields(
    cfg: DictConfig, output_dir: str | None, choices: Mapping | None = None, overrides: Iterable[str] = ()
) -> None:
    """Fill ``output_dir`` (when given) and, when unset, ``name``: ``default_name`` of Hydra's
    ``choices``, or without them the model's and datamodule's class names."""
    with open_dict(cfg):
        if output_dir is not None:
            cfg.output_dir = str(output_dir)
        if cfg.get("name") is None and choices:
            cfg.name = default_name(choices, overrides)
        elif cfg.get("name") is None:
            targets = [OmegaConf.select(cfg, f"{g}._target_", default="custom") for g in ("model", "datamodule")]
            cfg.name = "_".join(str(target).rsplit(".", 1)[-1].lower() for target in targets)


def default_name(choices: Mapping, overrides: Iterable[str] = ()) -> str:
    """The selected experiment, unless the command line swapped its model or data for others
    without naming an experiment; otherwise ``<model>_<datamodule>``, the selected options."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    experiment = choices.get("experiment")
    if experiment and ("experiment" in keys or not keys & {"model", "datamodule"}):
        return str(experiment)
    return f"{choices.get('model')}_{choices.get('datamodule')}".replace("/", "-")
