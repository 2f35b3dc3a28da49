"""One job = one experiment: validate, save the resolved config, launch the ranks.

Shared by the Hydra entry point (``python -m framework.train``) and the Python API.
"""
from __future__ import annotations

import logging
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from framework.distributed import detect_environment
from framework.engine.signals import Interrupted
from framework.launch.entry import launch, start_ranks_early
from framework.preflight import preflight, replaces_previous_run
from framework.strategies import resolve

log = logging.getLogger(__name__)


def run_job(cfg: DictConfig, after_validation: Optional[Callable[[], None]] = None) -> dict:
    """Validate ``cfg`` (raises ConfigError listing every problem, before anything is written
    but the log), write ``config.yaml`` to ``cfg.output_dir`` (and, on rank 0, whatever
    ``after_validation`` writes), train; return the results."""
    start_ranks_early(cfg)
    container = preflight(cfg)
    env = detect_environment()
    if env is None or env.rank == 0:
        _remove_previous_run(container)
    # Ranks get the resolved config: ${now:...} and friends are fixed once, here; and the
    # strategy's options in full (its schema's defaults filled in, `auto` resolved).
    container["strategy"] = asdict(resolve(container)[1])
    cfg = OmegaConf.create(container)
    output_dir = Path(cfg.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if env is None or env.rank == 0:  # SLURM tasks share the job's directory; rank 0 writes
        OmegaConf.save(cfg, output_dir / "config.yaml")
        if after_validation is not None:
            after_validation()
    log.info("Experiment '%s', output in %s", cfg.name, output_dir)
    results = launch(cfg)
    metrics = results.get("metrics", {})
    shown = ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(metrics.items())
                      if k.startswith(("val/", "test/")))
    log.info("Finished '%s' (%s): %s", cfg.name, results.get("status"), shown or "no metrics")
    written = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in output_dir.iterdir()))
    log.info("Outputs: %s (%s)", output_dir.resolve(), written)
    if results.get("status") == "interrupted":
        raise Interrupted(results["signal_number"], results)
    return results


def _remove_previous_run(container: dict) -> None:
    """overwrite=true: the previous run's outputs go, so that its TensorBoard events, metrics and
    checkpoints do not mix into this run's."""
    replaced = replaces_previous_run(container)
    for name in replaced:
        path = Path(container["output_dir"]) / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    if replaced:
        log.warning("overwrite=true: removed the previous run's %s from %s", ", ".join(replaced),
                    container["output_dir"])


def set_job_fields(cfg: DictConfig, output_dir: str, choices: Mapping | None = None,
                   overrides: Iterable[str] = ()) -> None:
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
        cfg.name = default_name(choices, overrides) if choices else "_".join(
            str(OmegaConf.select(cfg, f"{group}._target_", default="custom")).rsplit(".", 1)[-1].lower()
            for group in ("model", "datamodule"))


def default_name(choices: Mapping, overrides: Iterable[str] = ()) -> str:
    """The selected experiment, unless the command line swapped its model or data for others
    without naming an experiment; otherwise ``<model>_<datamodule>``, the selected options."""
    keys = {o.lstrip("+~").split("=", 1)[0] for o in overrides}
    experiment = choices.get("experiment")
    if experiment and ("experiment" in keys or not keys & {"model", "datamodule"}):
        return str(experiment)
    return f"{choices.get('model')}_{choices.get('datamodule')}"
