"""One rank's whole job: join the process group and the job's directory, build the Trainer and
its parts, run the stages (rank/stages.py), collect the results, and clean up whatever happened.

The path of a rank, top to bottom: ``run_launched`` (a locally launched rank: its log, its
threads) -> ``run`` -> build (rank/build.py) -> stages -> results (rank/results.py), with a stop
signal recorded by rank/interruption.py and teardown in rank/cleanup.py.
"""
from __future__ import annotations

import logging
import os
import time
import traceback

import torch
from omegaconf import DictConfig, OmegaConf

from framework.config.environment import RankEnv
from framework.config.relocate import relocate
from framework.engine.signals import StopSignals, stop_signals, watch_parent
from framework.rank.benchmark_repeats import repeat_timing
from framework.rank.build import build_trainer
from framework.rank.cleanup import cleanup, lost_peer
from framework.rank.interruption import record_interruption
from framework.rank.logs import configure_rank_logging
from framework.rank.results import collect, job_fields
from framework.rank.stages import run_stages
from framework.strategies import Strategy, build_strategy
from framework.strategies.collectives import broadcast_object, is_distributed

log = logging.getLogger(__name__)


def run_launched(container: dict, env: RankEnv) -> dict:
    """Entry of a rank that a local launcher (elastic agent, spawn) started: its own log, its
    share of the CPU threads, then the rank's job."""
    configure_rank_logging(container["output_dir"], env.rank)
    watch_parent()
    if "OMP_NUM_THREADS" not in os.environ:
        # N ranks on one CPU must not each start a thread per core (torchrun sets OMP_NUM_THREADS=1).
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // env.local_world_size))
    return run(OmegaConf.create(container), env)


def run(cfg: DictConfig, env: RankEnv = RankEnv()) -> dict:
    """Train and/or test the experiment ``cfg`` (resolved, validated) on this rank; return its results."""
    start = time.perf_counter()
    strategy = build_strategy(OmegaConf.to_container(cfg, resolve=True), env)
    strategy.setup_environment()
    cfg = _join_job_directory(cfg, strategy)
    results = job_fields(cfg, strategy)
    parts, error = None, None
    try:
        with StopSignals(stop_signals(cfg.trainer.get("stop_on_sigusr1"))) as signals:
            trainer, parts = build_trainer(cfg, env, strategy, signals)
            results["seed"] = trainer.seed
            results.update(run_stages(cfg, trainer, parts))
            results.update(collect(cfg, trainer))
            if cfg.get("benchmark_repeats", 1) > 1 and cfg.train and not trainer.interrupted:
                results["throughput"] = repeat_timing(OmegaConf.merge(cfg, {"seed": trainer.seed}), env, strategy,
                                                      results["throughput"])
            if trainer.interrupted:  # still under the handlers: a duplicate signal must not kill the save
                results.update(record_interruption(cfg, trainer))
        return results
    except BaseException as err:
        error = err
        results.update(status="failed", error=f"{type(err).__name__}: {err}", failed_rank=env.rank,
                       traceback=traceback.format_exc())
        log.error("rank %d failed: %s", env.rank, results["error"])
        if env.world_size > 1 and lost_peer(err):
            # A broken connection usually means a peer died. Exit a moment later, so that the
            # launcher sees that death first and names the rank that caused it, not this one.
            time.sleep(2.0)
        raise
    finally:
        results["wall_time_s"] = time.perf_counter() - start
        cleanup(cfg, strategy, parts.loggers if parts else [], results, error)


def _join_job_directory(cfg: DictConfig, strategy: Strategy) -> DictConfig:
    """Under torchrun every rank composed its own config; rank 0's directory is the job's, and
    every path derived from the others' scratch directories follows it."""
    if not (is_distributed() and strategy.world_size > 1):
        return cfg
    job_dir = broadcast_object(str(cfg.output_dir))
    cfg = OmegaConf.create(relocate(OmegaConf.to_container(cfg, resolve=True), str(cfg.output_dir), job_dir))
    configure_rank_logging(job_dir, strategy.rank)
    return cfg
