"""Start N local ranks: torch's elastic agent (torchrun's machinery, ranks forked from a
server process) or torch.multiprocessing.spawn (ddp_spawn).

Ranks get the resolved config as a plain dict: they never re-parse argv or re-run Hydra.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import threading
import uuid
from pathlib import Path

import torch

from framework.distributed import detect_environment, free_port
from framework.engine.checkpoint_files import resolve_ckpt_path, saved_step
from framework.engine.results import job_record, write_results
from framework.engine.signals import Interrupted, StopSignals, stop_signals
from framework.launch.fork_server import environment_changes, standard_start_method, use_fork_server
from framework.launch.main_module import STARTUP_HINT, needs_main, ranks_without_main
from framework.launch.rank_exit import exit_now
from framework.rank import run_launched

log = logging.getLogger(__name__)


def _elastic_entry(container: dict, env_changes: dict) -> dict:
    from torch.distributed.elastic.multiprocessing.errors import record

    for name, value in env_changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    results = record(run_launched)(container, detect_environment())
    if results.get("status") == "interrupted":
        # The agent may be shutting the job down: it would wait out its grace period (30 s) for
        # a return value it no longer collects. Leave now; results.json has everything.
        exit_now(128 + results["signal_number"])
    return results


def launch_elastic(container: dict, nprocs: int) -> dict:
    """N ranks under torch's elastic agent on this machine; returns rank 0's results."""
    standard_start_method()
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    use_fork_server()
    # Port 0: the agent's rendezvous store binds a free port itself (no pick-then-bind race),
    # and the ranks share that store.
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nprocs, run_id=uuid.uuid4().hex,
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0",
                          max_restarts=int(container["trainer"].get("max_restarts") or 0),
                          monitor_interval=0.1, start_method="forkserver")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    usr1 = signal.SIGUSR1 in stop_signals(container["trainer"].get("stop_on_sigusr1")) \
        and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGUSR1, _stop_agent) if usr1 else None
    try:
        with ranks_without_main(container):
            returns = elastic_launch(config, _elastic_entry)(container, environment_changes())
    except SignalException as err:
        # The agent got the signal and passed it to the ranks, which stopped at one step, saved
        # `last` and results.json; it waited for them (or killed them after its grace period).
        raise Interrupted(int(err.sigval), _read_results(container)) from None
    except ChildFailedError as err:
        results = _read_results(container)
        if results.get("status") == "interrupted":  # a signal to the ranks themselves, not to this process
            raise Interrupted(results["signal_number"], results) from None
        rank, message = _root_failure(err.failures)
        if needs_main(container) and message.startswith(_STARTED_BADLY):
            message += f"; {STARTUP_HINT}"
        raise _job_failed(container, nprocs, rank, message) from None
    finally:
        if usr1:
            signal.signal(signal.SIGUSR1, previous)
    return returns[0]


def _stop_agent(signum: int, frame) -> None:
    # As the agent's own handler does for SIGTERM/SIGINT: it then passes the signal to the ranks.
    from torch.distributed.elastic.multiprocessing.api import SignalException

    raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))


_STARTED_BADLY = "exited while starting, before the framework ran in it"


def _root_failure(failures: dict) -> tuple[int, str]:
    """The rank that failed first, and how. A rank killed by a signal is the cause (its peers
    then fail on the broken connection, often before the agent sees the death); otherwise the
    earliest failure."""
    killed = {rank: f for rank, f in failures.items() if f.exitcode < 0}
    rank, failure = min((killed or failures).items(), key=lambda item: (item[1].timestamp, item[0]))
    if failure.exitcode < 0:
        return rank, f"killed by {signal.Signals(-failure.exitcode).name} (exit code {failure.exitcode})"
    message = failure.message.get("message", str(failure.message)) if isinstance(failure.message, dict) \
        else str(failure.message)
    if message.startswith("To enable traceback"):  # torch's placeholder: the rank wrote no error file
        return rank, f"{_STARTED_BADLY} (exit code {failure.exitcode}; its traceback is on the console)"
    return rank, " | ".join(message.strip().splitlines()) or f"exit code {failure.exitcode}"


def _read_results(container: dict) -> dict:
    path = Path(container["output_dir"]) / "results.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _job_failed(container: dict, nprocs: int, rank: int, message: str) -> RuntimeError:
    """Record in results.json which rank failed first and why (with the job's fields, whichever
    rank wrote what before); return the error to raise."""
    run_dir = Path(container["output_dir"])
    written = _read_results(container)  # rank 0's record of this run, unless it kept a finished one's
    if written.get("status") in ("completed", "diverged"):
        failed = run_dir / "results.failed.json"
        written = json.loads(failed.read_text()) if failed.exists() else {}
    results = {**job_record(container, container["strategy"]["name"], nprocs), **written}
    last = resolve_ckpt_path("last", str(run_dir))
    step = saved_step(last)
    if step is not None:  # what survives the failure, and how to go on from it
        results.update(checkpoint=str(last), checkpoint_step=step)
        message += f"; {last} holds step {step}: resume with ckpt_path=last"
    results.update(status="failed", failed_rank=rank, error=message)
    write_results(run_dir, results)
    log.error("rank %d failed first: %s", rank, message)  # the verdict, in the job's train.log too
    return RuntimeError(f"rank {rank} failed: {message}")


def _spawn_entry(local_rank: int, container: dict, nprocs: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank),
                      LOCAL_RANK=str(local_rank), WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs))
    run_launched(container, detect_environment())
    exit_now(0)  # its results went to results.json (rank 0); a failure raises to spawn's error queue instead


def launch_spawn(container: dict, nprocs: int) -> dict:
    """N ranks by torch.multiprocessing.spawn; rank 0's results come back through results.json."""
    standard_start_method()
    with ranks_without_main(container):
        context = torch.multiprocessing.start_processes(_spawn_entry, args=(container, nprocs, free_port()),
                                                        nprocs=nprocs, join=False, start_method="spawn")
    # A stop signal to this process goes on to the ranks, which stop together and save `last`.
    with StopSignals([signal.SIGTERM, signal.SIGINT]) as signals:
        signals.forward_to = [p.pid for p in context.processes]
        _join(container, context)
    if signals.received:
        raise Interrupted(signals.received, _read_results(container))
    return _read_results(container)


def _join(container: dict, context) -> None:
    try:
        while not context.join():
            pass
    except torch.multiprocessing.ProcessRaisedException as err:
        # The child's traceback: keep the exception lines after its last indented frame line.
        lines = str(err).strip().splitlines()
        last_frame = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
        raise _job_failed(container, len(context.processes), err.error_index,
                          " | ".join(lines[last_frame + 1:]) or "failed") from None
    except torch.multiprocessing.ProcessExitedException as err:
        how = f"killed by {err.signal_name}" if err.signal_name else f"exited with code {err.exit_code}"
        raise _job_failed(container, len(context.processes), err.error_index, how) from None
