"""What the Hydra entry points (framework.train, framework.evaluate) share: the job function
Hydra calls for each run or sweep job, and what it records in the run directory."""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.environment import detect_environment
from framework.engine.results import update_json, write_json
from framework.engine.signals import Interrupted
from framework.job.naming import set_job_fields
from framework.job.run import run_job
from framework.report import finish_sweep

log = logging.getLogger("framework")


def hydra_job(cfg: DictConfig, prepare: Optional[Callable[[DictConfig], DictConfig]] = None) -> Optional[float]:
    """Run one Hydra job; returns the value a sweeper optimises (``optimized_metric``)."""
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    set_job_fields(cfg, runtime.output_dir, runtime.choices, hydra_cfg.overrides.task)
    cfg = prepare(cfg) if prepare else cfg
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    started = time.time()
    try:
        results = run_job(cfg, after_validation=lambda: write_hydra_dir(cfg, hydra_cfg, runtime.output_dir))
    except ConfigError as err:
        log.error("%s", err)
        print(err, file=sys.stderr)
        if not sweeping:
            sys.exit(2)
        # In a sweep an invalid combination is a result, not the end of the sweep.
        record_invalid(cfg, runtime.output_dir, err)
        return None
    except Interrupted as err:
        log.error("%s", err)
        if sweeping:  # no further jobs; the report covers the jobs so far, this one interrupted
            record_job(runtime.output_dir, hydra_cfg, started)
            finish_sweep(Path(hydra_cfg.sweep.dir))
        sys.exit(128 + err.signum)
    except Exception:
        if not sweeping:
            raise
        # results.json says which rank failed and why; the sweep goes on, and the report
        # at its end turns the failures into the exit status (framework.report.SweepReport).
        log.exception("job %s failed", runtime.output_dir)
        return None
    finally:
        record_job(runtime.output_dir, hydra_cfg, started)
    return results.get("metrics", {}).get(cfg.get("optimized_metric") or "val/loss")


def write_hydra_dir(cfg: DictConfig, hydra_cfg: DictConfig, output_dir: str) -> None:
    """``.hydra/`` as Hydra writes it (the composed config, Hydra's own, the overrides), once
    the config is valid: a run refused by validation leaves only its train.log behind."""
    directory = Path(output_dir) / ".hydra"
    directory.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, directory / "config.yaml")
    OmegaConf.save(OmegaConf.create({"hydra": OmegaConf.to_container(hydra_cfg, resolve=False)}),
                   directory / "hydra.yaml")
    OmegaConf.save(OmegaConf.create(list(hydra_cfg.overrides.task)), directory / "overrides.yaml")


def record_job(output_dir: str, hydra_cfg, started: float) -> None:
    """Add the Hydra job to results.json: its overrides (what the report compares jobs by)
    and its wall time from composition to the end, rank start-up included."""
    env = detect_environment()
    path = Path(output_dir) / "results.json"
    if (env is not None and env.rank != 0) or not path.exists() or path.stat().st_mtime < started:
        return  # rank 0 owns results.json; and one this job did not write is not touched
    update_json(path, job={
        "num": hydra_cfg.job.get("num"), "overrides": list(hydra_cfg.overrides.task),
        "started_at": started, "time_s": time.time() - started})


def record_invalid(cfg: DictConfig, output_dir: str, err: ConfigError) -> None:
    """results.json for a combination rejected before any process started."""
    trainer = cfg.get("trainer") or {}
    if (Path(output_dir) / "results.json").exists() and not cfg.get("overwrite"):
        return  # another run's results: kept (the error is in the log)
    write_json(Path(output_dir) / "results.json", {
        "status": "invalid", "experiment": cfg.get("name"),
        "strategy": OmegaConf.select(cfg, "strategy.name", default=None),
        "devices": trainer.get("devices"), "num_nodes": trainer.get("num_nodes"),
        "world_size": None, "reason": "; ".join(err.problems), "output_dir": str(output_dir)})
