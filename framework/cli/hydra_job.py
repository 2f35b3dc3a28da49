"""What the Hydra entry points (framework.train, framework.evaluate) share: the job function
Hydra calls for each run or sweep job, and what it records in the run directory."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from framework.config import ConfigError
from framework.config.environment import PACKED_JOB, PARALLEL_JOBS, available_cores, detect_environment
from framework.config.errors import InputError
from framework.engine.attempts import ATTEMPTS
from framework.engine.results import update_json, write_json
from framework.engine.run_directory import DirectoryBusy
from framework.engine.signals import Interrupted
from framework.job.naming import set_job_fields
from framework.job.run import run_job
from framework.launch.failures import JobFailed
from framework.report import SWEEP_FILE, finish_sweep

log = logging.getLogger("framework")


def hydra_job(cfg: DictConfig, prepare: Optional[Callable[[DictConfig], DictConfig]] = None) -> Optional[float]:
    """Run one Hydra job; returns the value a sweeper optimises (``optimized_metric``)."""
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    set_job_fields(cfg, runtime.output_dir, runtime.choices, hydra_cfg.overrides.task)
    cfg = prepare(cfg) if prepare else cfg
    sweeping = hydra_cfg.mode == RunMode.MULTIRUN
    if sweeping:
        os.environ[PARALLEL_JOBS] = str(parallel_jobs(hydra_cfg))
    started, busy = time.time(), False
    try:
        results = run_job(cfg, after_validation=lambda record: write_hydra_dir(cfg, hydra_cfg, record))
    except DirectoryBusy as err:  # another run writes there: nothing of this job goes into that directory
        busy = True
        report_once(err)
        if not sweeping:
            sys.exit(2)
        record_refused(hydra_cfg, runtime.output_dir)
        return None
    except ConfigError as err:
        report_once(err)
        if not sweeping:
            sys.exit(2)
        # In a sweep an invalid combination is a result, not the end of the sweep.
        record_invalid(cfg, runtime.output_dir, err)
        return None
    except Interrupted as err:
        log.error("%s", err)
        if sweeping:  # no further jobs; the report covers the jobs so far, this one interrupted
            record_job(runtime.output_dir, hydra_cfg, started)
            if not os.environ.get(PACKED_JOB):  # a packed sweep's launcher writes it once its jobs end
                finish_sweep(Path(hydra_cfg.sweep.dir), stopped_by=err.signum)
        sys.exit(128 + err.signum)
    except (JobFailed, InputError) as err:
        return job_failed(err, sweeping, runtime.output_dir)
    except Exception:
        if not sweeping:
            raise
        # results.json says which rank failed and why; the sweep goes on, and the report
        # at its end turns the failures into the exit status (framework.report.SweepReport).
        log.exception("job %s failed", runtime.output_dir)
        return None
    finally:
        if not busy:
            record_job(runtime.output_dir, hydra_cfg, started)
    return results.get("metrics", {}).get(cfg.get("optimized_metric") or "val/loss")


def job_failed(err: Exception, sweeping: bool, output_dir: str) -> None:
    """A job that failed in a way its rank already said: no launcher or engine frames. Alone, the
    program exits 1 (a damaged checkpoint or shard said once, in one line); in a sweep, the next job."""
    if not sweeping:
        if isinstance(err, InputError):
            print(f"Error: {err}", file=sys.stderr)
        sys.exit(1)
    log.error("job %s failed: %s", output_dir, err)


def parallel_jobs(hydra_cfg) -> int:
    """The jobs that run at once: joblib's ``n_jobs`` (-1: one per core), else one at a time."""
    n_jobs = (
        OmegaConf.select(hydra_cfg, "launcher.n_jobs")
        if "joblib" in str(OmegaConf.select(hydra_cfg, "launcher._target_") or "")
        else None
    )
    if not isinstance(n_jobs, int) or n_jobs == 0:
        return 1
    return n_jobs if n_jobs > 0 else max(1, available_cores() + 1 + n_jobs)  # joblib: -1 all cores, -2 all but one


def record_refused(hydra_cfg, output_dir: str) -> None:
    """A sweep job refused because another run writes its directory: the sweep's own record
    lists it, and the sweep exits non-zero (framework.report.SweepReport)."""
    path = Path(hydra_cfg.sweep.dir) / SWEEP_FILE
    refused = json.loads(path.read_text()).get("refused_jobs", []) if path.exists() else []
    update_json(path, refused_jobs=[*refused, Path(output_dir).name])


def report_once(err: Exception) -> None:
    """The error on the console once (stderr, as it is) and in train.log: Hydra's console handler
    would print the log line beside it."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (err,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(err, file=sys.stderr)


def write_hydra_dir(cfg: DictConfig, hydra_cfg: DictConfig, output_dir: str) -> None:
    """``.hydra/`` as Hydra writes it (the composed config, Hydra's own, the overrides), once
    the config is valid: a run refused by validation leaves only its train.log behind."""
    directory = Path(output_dir) / ".hydra"
    directory.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(cfg, directory / "config.yaml")
    OmegaConf.save(
        OmegaConf.create({"hydra": OmegaConf.to_container(hydra_cfg, resolve=False)}), directory / "hydra.yaml"
    )
    OmegaConf.save(OmegaConf.create(list(hydra_cfg.overrides.task)), directory / "overrides.yaml")


def record_job(output_dir: str, hydra_cfg, started: float) -> None:
    """Add the Hydra job to results.json (and to its attempt's, engine/attempts.py): its overrides
    (what the report compares jobs by) and its wall time from composition to the end, rank
    start-up included."""
    env = detect_environment()
    if env is not None and env.rank != 0:
        return  # rank 0 owns results.json
    job = {
        "num": hydra_cfg.job.get("num"),
        "overrides": list(hydra_cfg.overrides.task),
        "started_at": started,
        "time_s": time.time() - started,
    }
    for path in [Path(output_dir) / "results.json", *Path(output_dir).glob(f"{ATTEMPTS}/*/results.json")]:
        if path.exists() and path.stat().st_mtime >= started:  # one this job did not write is not touched
            update_json(path, job=job)


def record_invalid(cfg: DictConfig, output_dir: str, err: ConfigError) -> None:
    """results.json for a combination rejected before any process started."""
    trainer = cfg.get("trainer") or {}
    if (Path(output_dir) / "results.json").exists() and not cfg.get("overwrite"):
        return  # another run's results: kept (the error is in the log)
    write_json(
        Path(output_dir) / "results.json",
        {
            "status": "invalid",
            "experiment": cfg.get("name"),
            "strategy": OmegaConf.select(cfg, "strategy.name", default=None),
            "devices": trainer.get("devices"),
            "num_nodes": trainer.get("num_nodes"),
            "world_size": None,
            "reason": "; ".join(err.problems),
            "output_dir": str(output_dir),
        },
    )
