"""N local ranks under torch's elastic agent (torchrun's machinery), forked from a server process
that imported torch and the framework once (launch/fork_server.py).

Ranks get the resolved config as a plain dict: they never re-parse argv or re-run Hydra.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
import uuid

from framework.config.environment import detect_environment
from framework.engine.signals import Interrupted, stop_signals
from framework.launch.failures import job_failed, read_results
from framework.launch.fork_server import environment_changes, standard_start_method, use_fork_server
from framework.launch.main_module import STARTUP_HINT, needs_main, ranks_without_main
from framework.launch.process_exit import exit_now
from framework.rank.run import run_launched

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
        raise Interrupted(int(err.sigval), read_results(container)) from None
    except ChildFailedError as err:
        results = read_results(container)
        if results.get("status") == "interrupted":  # a signal to the ranks themselves, not to this process
            raise Interrupted(results["signal_number"], results) from None
        rank, message = _root_failure(err.failures)
        if needs_main(container) and message.startswith(_STARTED_BADLY):
            message += f"; {STARTUP_HINT}"
        raise job_failed(container, nprocs, rank, message) from None
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
