"""A job's name and output directory, filled into its config before validation."""

from __future__ import annotations

from typing import Iterable, Mapping

from omegaconf import DictConfig, OmegaConf, open_dict


def set_job_fields(
    cfg: DictConfig, output_dir: str, choices: Mapping | None = None, overrides: Iterable[str] = ()
) -> None:
    """Fill ``output_dir`` and, when unset, ``name``."""
    with open_dict(cfg):
        cfg.output_dir = str(output_dir)
    fill_name(cfg, choices, overrides)


def fill_name(cfg: DictConfig, choices: Mapping | None = None, overrides: Iterable[str] = ()) -> None:
    """``name``, when unset: ``default_name`` of Hydra's ``choices``, or without them the
    model's and datamodule's class names."""
    if cfg.get("name") is not None:
        return
    with open_dict(cfg):
        cfg.name = (
            default_name(choices, overrides)
            if choices
            else "_".join(
                str(OmegaConf.select(cfg, f"{group}._target_", default="custom")).rsplit(".", 1)[-1].lower()
                for group in ("model", "datamodule")
            )
        )


def default_name(choices: Mapping, overrides: Iterable[str] = ()) -> str:
    """The selected experiment, unless the command line swapped its model or data for others
    without naming an experiment; otherwise ``<model>_<datamodule>``, the selected options."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    experiment = choices.get("experiment")
    if experiment and ("experiment" in keys or not keys & {"model", "datamodule"}):
        return str(experiment)
    return f"{choices.get('model')}_{choices.get('datamodule')}".replace("/", "-")
