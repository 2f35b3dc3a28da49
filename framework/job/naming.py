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
    without naming an experiment; otherwise ``<model>_<datamodule>``: the selected options, or the
    class a ``model._target_`` / ``datamodule._target_`` on the command line names."""
    given = dict(o.lstrip("+~").split("=", 1) if "=" in o else (o.lstrip("+~"), "") for o in overrides)
    names = {group: str(choices.get(group)) for group in ("model", "datamodule")}
    for group in names:
        target = given.get(f"{group}._target_")
        names[group] = target.rsplit(".", 1)[-1].lower() if target else names[group]
    swapped = any(k.removesuffix("._target_") in names for k in given)  # model=..., or model._target_=...
    experiment = choices.get("experiment")
    if experiment and ("experiment" in given or not swapped):
        return str(experiment)
    return f"{names['model']}_{names['datamodule']}".replace("/", "-")
