"""N local ranks started by torch.multiprocessing.spawn (strategy=ddp_spawn): rank 0's results
come back through results.json."""

from __future__ import annotations

import os
import signal

import torch

from framework.config.environment import detect_environment, free_port
from framework.config.experiment import Experiment
from framework.engine.signals import Interrupted, StopSignals
from framework.launch.failures import job_failed, read_results
from framework.launch.main_module import needs_main, ranks_without_main
from framework.launch.process_exit import exit_now
from framework.launch.servers import standard_start_method
from framework.rank.run import run_launched


def _spawn_entry(local_rank: int, run: Experiment, nprocs: int, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(local_rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(nprocs),
        LOCAL_WORLD_SIZE=str(nprocs),
    )
    run_launched(run, detect_environment())
    exit_now(0)  # its results went to results.json (rank 0); a failure raises to spawn's error queue instead


def launch_spawn(run: Experiment, nprocs: int) -> dict:
    """N ranks by torch.multiprocessing.spawn; rank 0's results come back through results.json."""
    standard_start_method()
    with ranks_without_main(needs_main(run)):
        context = torch.multiprocessing.start_processes(
            _spawn_entry, args=(run, nprocs, free_port()), nprocs=nprocs, join=False, start_method="spawn"
        )
    # A stop signal to this process goes on to the ranks, which stop together and save `last`.
    with StopSignals([signal.SIGTERM, signal.SIGINT]) as signals:
        signals.forward_to = [p.pid for p in context.processes]
        _join(run, context)
    if signals.received:
        raise Interrupted(signals.received, read_results(run))
    return read_results(run)


def _join(run: Experiment, context) -> None:
    try:
        while not context.join():
            pass
    except torch.multiprocessing.ProcessRaisedException as err:
        # The child's traceback: keep the exception lines after its last indented frame line.
        lines = str(err).strip().splitlines()
        last_frame = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
        raise job_failed(
            run, len(context.processes), err.error_index, " | ".join(lines[last_frame + 1 :]) or "failed"
        ) from None
    except torch.multiprocessing.ProcessExitedException as err:
        how = f"killed by {err.signal_name}" if err.signal_name else f"exited with code {err.exit_code}"
        raise job_failed(run, len(context.processes), err.error_index, how) from None
