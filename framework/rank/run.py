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

from framework.config.environment import PARALLEL_JOBS, RankEnv, available_cores
from framework.config.errors import ConfigError, InputError
from framework.config.experiment import Experiment
from framework.config.relocate import relocate
from framework.engine import signals
from framework.engine.signals import StopNow, StopSignals, stop_signals, watch_parent
from framework.rank.benchmark_repeats import repeat_timing
from framework.rank.build import build_trainer
from framework.rank.cleanup import cleanup, lost_peer
from framework.rank.interruption import record_interruption, stopped_after_training
from framework.rank.known_warnings import quiet_known_warnings
from framework.rank.logs import configure_rank_logging
from framework.rank.results import collect, job_fields
from framework.rank.stages import run_stages
from framework.rank.strategy_probe import choose_strategy
from framework.strategies import Strategy, build_strategy
from framework.strategies.comm.collectives import broadcast_object, is_distributed

log = logging.getLogger(__name__)

# Below this many parameters a rank trains on one thread by default (model_threads).
SMALL_MODEL_PARAMETERS = 1_000_000


def run_launched(job: Experiment, env: RankEnv) -> dict:
    """Entry of a rank that a local launcher (elastic agent, spawn) started: its own log, its
    share of the CPU threads, then the rank's job."""
    configure_rank_logging(job.output_dir, env.rank)
    watch_parent()
    return run(job, env)


def cpu_threads(run: Experiment, env: RankEnv) -> int:
    """torch's threads for this rank: ``trainer.num_threads``, else OMP_NUM_THREADS (torchrun sets
    1), else this process's cores shared by the node's ranks and by the sweep's jobs that run
    beside this one: N ranks on one CPU must not each start a thread per core."""
    if run.trainer.num_threads:
        return int(run.trainer.num_threads)
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    jobs = int(os.environ.get(PARALLEL_JOBS) or 1)
    return max(1, available_cores() // (env.local_world_size * max(1, jobs)))


def model_threads(run: Experiment, threads: int, model: torch.nn.Module) -> int:
    """The threads for training ``model``: one below ``SMALL_MODEL_PARAMETERS`` unless
    ``trainer.num_threads`` or OMP_NUM_THREADS says otherwise, else ``threads`` (the cores' share).
    A small model's step is too short for a second thread to pay (the quick start takes as long
    with 1 as with 2 on an idle machine), and beside another job each extra thread waits for a
    core (4x slower): benchmarks/threads.py."""
    if run.trainer.num_threads or os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return threads
    return 1 if sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMETERS else threads


def run(job: Experiment, env: RankEnv = RankEnv()) -> dict:
    """Train and/or test the experiment ``job`` (resolved, validated) on this rank; return its results."""
    start = time.perf_counter()
    threads = cpu_threads(job, env)
    torch.set_num_threads(threads)
    quiet_known_warnings(env.rank)
    stops = StopSignals(stop_signals(job.trainer.stop_on_sigusr1))
    # The handlers stay through the cleanup: a copy of the stop signal (the launcher passes on
    # what the process group already got) must not kill rank 0 while it writes results.json.
    with stops:
        job, choice = choose_strategy(job, env, stops)  # strategy=auto: the candidate it takes
        strategy = build_strategy(job, env)
        strategy.setup_environment()
        job = _join_job_directory(job, strategy)
        results = {**job_fields(job, strategy), "threads": threads, **({"strategy_choice": choice} if choice else {})}
        return _run_stages_and_clean_up(job, env, strategy, results, stops, start)


def _run_stages_and_clean_up(
    job: Experiment, env: RankEnv, strategy: Strategy, results: dict, stops: StopSignals, start: float
) -> dict:
    trainer, parts, error = None, None, None
    try:
        trainer, parts = build_trainer(job, env, strategy, stops)
        results["threads"] = model_threads(job, results["threads"], parts.model)
        torch.set_num_threads(results["threads"])
        results["seed"] = trainer.seed
        results.update(run_stages(job, trainer, parts, stops))
        results.update(collect(job, trainer))
        if job.benchmark_repeats > 1 and job.train and not trainer.interrupted:
            results["throughput"] = repeat_timing(
                job.with_config(seed=trainer.seed), env, strategy, results["throughput"]
            )
        if trainer.interrupted:  # still under the handlers: a duplicate signal must not kill the save
            results.update(record_interruption(job, trainer))
        return results
    except StopNow as stop:
        results.update(stopped_after_training(job, trainer, stop.signum))
        return results
    except BaseException as err:
        if stops.after_training and signals.RECEIVED and lost_peer(err):
            # a peer left its stage on the same stop signal while this rank waited for it
            results.update(stopped_after_training(job, trainer, signals.RECEIVED))
            return results
        error = err
        results.update(
            status="failed",
            error=f"{type(err).__name__}: {err}",
            failed_rank=env.rank,
            traceback=traceback.format_exc(),
        )
        if isinstance(err, ConfigError):  # a check where the work found it: the job says it as before start
            results["problems"] = err.problems
        # a damaged input (a checkpoint, a shard), a refused config, a peer lost (its own failure is the
        # verdict): why in a line (the traceback is in results.json)
        peer_lost = env.world_size > 1 and lost_peer(err)
        brief = peer_lost or isinstance(err, (InputError, ConfigError))
        said = "" if brief else "\n" + results["traceback"].rstrip()
        log.error("rank %d failed: %s%s", env.rank, results["error"], said)
        if peer_lost:
            # A broken connection usually means a peer died. Exit a moment later, so that the
            # launcher sees that death first and names the rank that caused it, not this one.
            time.sleep(2.0)
        raise
    finally:
        results["wall_time_s"] = time.perf_counter() - start
        cleanup(job, strategy, parts.loggers if parts else [], results, error)


def _join_job_directory(job: Experiment, strategy: Strategy) -> Experiment:
    """Under torchrun every rank composed its own config; rank 0's directory is the job's, and
    every path derived from the others' scratch directories follows it."""
    if not (is_distributed() and strategy.world_size > 1):
        return job
    job_dir = broadcast_object(str(job.output_dir))
    job = Experiment(relocate(job.config, str(job.output_dir), job_dir), job.layout)
    configure_rank_logging(job_dir, strategy.rank)
    return job
