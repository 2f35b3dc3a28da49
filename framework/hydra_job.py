"""What the Hydra entry points (framework.train, framework.evaluate) share: the job function
Hydra calls for each run or sweep job, and the console entry that prepares the command line."""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.overrides import lenient
from framework.distributed import detect_environment
from framework.engine.results import update_json, write_json
from framework.engine.signals import Interrupted
from framework.job import run_job, set_job_fields
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


def _register_plugins() -> None:
    """Hydra finds plugins by scanning the ``hydra_plugins`` package, which an editable install
    (setuptools' import hook) hides from its scan: register ours by hand (harmless when found)."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    try:
        from hydra_plugins.framework_slurm.slurm_sweep import SlurmSweepLauncher
    except ImportError:
        return
    if issubclass(SlurmSweepLauncher, Launcher):  # hydra-submitit-launcher is installed
        Plugins.instance().register(SlurmSweepLauncher)


def console_entry(hydra_main: Callable[[], None]) -> None:
    """Run a ``@hydra.main`` function from a console script: typo'd keys go to our validator,
    the current directory is importable, and under torchrun/SLURM only rank 0 owns Hydra's run
    directory."""
    sys.argv[1:] = lenient(sys.argv[1:])
    _register_plugins()
    if os.getcwd() not in sys.path and "" not in sys.path:
        # As `python -m framework.train` does: the user's modules in the current directory import.
        sys.path.insert(0, os.getcwd())
    env = detect_environment()
    scratch = None
    if env is not None and env.rank != 0:
        # Every rank runs the entry point. Only rank 0's Hydra run dir is the job's (ranks agree
        # on it in framework.rank); the others get a scratch dir and log under <job dir>/ranks/<r>/.
        scratch = tempfile.mkdtemp(prefix=f"framework-rank{env.rank}-")
        sys.argv += [f"hydra.run.dir={scratch}"]
    try:
        hydra_main()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
