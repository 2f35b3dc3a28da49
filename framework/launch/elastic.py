"""N local ranks under torch's elastic agent (torchrun's machinery), forked from a server process
that imported torch and the framework once (launch/servers.py).

Ranks get the resolved config as a plain dict: they never re-parse argv or re-run Hydra.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import uuid

from framework.config.environment import detect_environment
from framework.config.experiment import Experiment
from framework.engine import signals
from framework.engine.signals import Interrupted, stop_signals
from framework.launch.agent_leftovers import RENDEZVOUS_BACKEND, agent_leftovers_taken_back
from framework.launch.failures import job_failed, read_results
from framework.launch.loopback_stores import stores_listening_on
from framework.launch.main_module import STARTUP_HINT, needs_main, ranks_without_main
from framework.launch.process_exit import exit_now
from framework.launch.servers import environment_changes, standard_start_method, use_fork_server
from framework.rank.logs import rank_log
from framework.rank.run import run_launched

log = logging.getLogger(__name__)


def _elastic_entry(run: Experiment, env_changes: dict) -> dict:
    from torch.distributed.elastic.multiprocessing.errors import record

    for name, value in env_changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    results = record(run_launched)(run, detect_environment())
    if results.get("status") == "interrupted" or signals.RECEIVED:
        # The agent may be shutting the job down: it would wait out its grace period (30 s) for
        # a return value it no longer collects. Leave now; results.json has everything.
        exit_now(128 + results["signal_number"] if results.get("status") == "interrupted" else 0)
    return results


def launch_elastic(run: Experiment, nprocs: int, fork: bool = False) -> dict:
    """N ranks under torch's elastic agent on this machine; returns rank 0's results. ``fork``: the
    ranks are forks of this very process (a notebook's classes come along), not of the fork server."""
    standard_start_method()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    if not fork:
        use_fork_server()
    usr1 = (
        signal.SIGUSR1 in stop_signals(run.trainer.stop_on_sigusr1)
        and threading.current_thread() is threading.main_thread()
    )
    try:
        with (
            agent_leftovers_taken_back() as agent_dir,
            ranks_without_main(needs_main(run)) if not fork else contextlib.nullcontext(),
            stores_listening_on("127.0.0.1"),
            _without_the_agents_failure_dump(),
        ):
            if usr1:
                signal.signal(signal.SIGUSR1, _stop_agent)
            config = _launch_config(run, nprocs, fork, agent_dir)
            returns = elastic_launch(config, _elastic_entry)(run, environment_changes())
    except SignalException as err:
        # The agent got the signal and passed it to the ranks, which stopped at one step, saved
        # `last` and results.json; it waited for them (or killed them after its grace period).
        # A signal that came once the work was done (results written, completed) stops nothing.
        results = read_results(run)
        if results.get("status") in ("completed", "diverged"):
            return results
        raise Interrupted(int(err.sigval), results) from None
    except ChildFailedError as err:
        results = read_results(run)
        killed = any(f.exitcode < 0 for f in err.failures.values())  # a rank died of a signal it did not handle
        # A rank that failed of its own (a damaged shard: exit 1) ends the job, and the agent's SIGTERM
        # to the others is only its teardown: its error wins over rank 0's "interrupted".
        failed = {r: f for r, f in err.failures.items() if f.exitcode > 0 and not _stopped(f.exitcode)}
        if results.get("status") == "interrupted" and not killed and not failed:  # a signal to the ranks
            raise Interrupted(results["signal_number"], results) from None
        rank, message = _root_failure(failed or err.failures, run.output_dir)
        if needs_main(run) and message.startswith(_STARTED_BADLY):
            message += f"; {STARTUP_HINT}"
        raise job_failed(run, nprocs, rank, message) from None
    return returns[0]


def _launch_config(run: Experiment, nprocs: int, fork: bool, agent_dir: str):
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    # Port 0: the agent's rendezvous store binds a free port itself (no pick-then-bind race),
    # and the ranks share that store.
    return LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=uuid.uuid4().hex,
        rdzv_backend=RENDEZVOUS_BACKEND,
        rdzv_endpoint="127.0.0.1:0",
        local_addr="127.0.0.1",
        max_restarts=int(run.trainer.max_restarts or 0),
        monitor_interval=0.1,
        start_method="fork" if fork else "forkserver",
        logs_specs=DefaultLogsSpecs(log_dir=agent_dir),  # (the ranks' own logs are the run's: ranks/)
    )


@contextlib.contextmanager
def _without_the_agents_failure_dump():
    """A failed rank logs its own traceback, and the launch names it once (launch/failures.py);
    torch's agent would add ~90 lines of its own frames around the same traceback."""
    agent_log = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    level = agent_log.level
    agent_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        agent_log.setLevel(level)


def _stop_agent(signum: int, frame) -> None:
    # As the agent's own handler does for SIGTERM/SIGINT: it then passes the signal to the ranks.
    from torch.distributed.elastic.multiprocessing.api import SignalException

    raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))


def _fault_stack(log_file) -> str:
    """Where a rank that died of a fatal signal was: faulthandler's dump in its log (rank/logs.py),
    the innermost frame of the thread the signal hit, else of the main thread (listed last: a C++
    thread of a library has no Python frame)."""
    try:
        text = log_file.read_text(errors="replace")
    except OSError:
        return ""
    if "Fatal Python error" not in text:
        return ""
    threads = text[text.rfind("Fatal Python error") :].split("\n\n")
    current = [t for t in threads if t.startswith("Current thread")]
    frames = [line.strip() for t in current + threads[::-1] for line in t.splitlines() if line.startswith("  File ")]
    return f"; its threads' stacks are in {log_file}" + (f" (last: {frames[0]})" if frames else "")


_STARTED_BADLY = "exited while starting, before the framework ran in it"


def _stopped(exitcode: int) -> bool:
    """A rank's exit code after a stop signal (128 + SIGTERM, SIGINT or SIGUSR1: signals.py)."""
    return exitcode - 128 in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def _root_failure(failures: dict, output_dir: str) -> tuple[int, str]:
    """The rank that failed first, and how. A rank killed by a signal is the cause (its peers
    then fail on the broken connection, often before the agent sees the death); otherwise the
    earliest failure."""
    killed = {rank: f for rank, f in failures.items() if f.exitcode < 0}
    rank, failure = min((killed or failures).items(), key=lambda item: (item[1].timestamp, item[0]))
    if failure.exitcode < 0:
        return (
            rank,
            f"killed by {signal.Signals(-failure.exitcode).name} (exit code {failure.exitcode})"
            + _fault_stack(rank_log(output_dir, rank)),
        )
    message = (
        failure.message.get("message", str(failure.message))
        if isinstance(failure.message, dict)
        else str(failure.message)
    )
    if message.startswith("To enable traceback"):  # torch's placeholder: the rank wrote no error file
        return rank, f"{_STARTED_BADLY} (exit code {failure.exitcode}; its traceback is on the console)"
    return rank, " | ".join(message.strip().splitlines()) or f"exit code {failure.exitcode}"
