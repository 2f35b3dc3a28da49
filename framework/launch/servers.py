"""What starts early, in processes of their own: the server that forks a job's local ranks, and
the server that forks a packed sweep's jobs (both multiprocessing's fork server, preloaded with
what their children import). Each imports torch and the framework once, which takes seconds;
started while this process still composes and validates the config, that time overlaps.
The console entry starts either from the command line, before Hydra composes anything
(``start_from_command_line``); a job starts the ranks' from its composed config (launch/start.py
``start_ranks_early``), and a packed launcher its job server at the launch.

Light on purpose (no torch, no Hydra at import).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import tempfile

from framework.config.environment import LAUNCHER_PID
from framework.launch.main_module import ranks_without_main

# Ranks fork from one server process that imported torch and the framework once (the first
# job pays for it, later jobs of a sweep start their ranks in well under a second). The
# server keeps the environment it started with; later changes travel with each launch.
_SERVER_ENV: dict | None = None
# What the elastic agent sets for each worker: never taken from the parent's environment.
_AGENT_KEYS = {
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_NAME",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
}


def environment_changes() -> dict:
    """{name: value, or None when removed} since the fork server started."""
    global _SERVER_ENV
    if _SERVER_ENV is None:
        _SERVER_ENV = dict(os.environ)
    changes = {k: v for k, v in os.environ.items() if _SERVER_ENV.get(k) != v}
    changes.update({k: None for k in _SERVER_ENV if k not in os.environ})
    changes = {k: v for k, v in changes.items() if k not in _AGENT_KEYS and not k.startswith("TORCHELASTIC_")}
    # The ranks' parent is the fork server, kept alive by them: they watch this process instead.
    return {**changes, LAUNCHER_PID: str(os.getpid())}


def standard_start_method() -> None:
    # Spawned children inherit the parent's start-method name; inside a joblib (loky) worker
    # that is "loky", which a fresh child cannot set up. Use plain spawn there.
    if multiprocessing.get_start_method(allow_none=True) not in (None, "spawn", "fork", "forkserver"):
        multiprocessing.set_start_method("spawn", force=True)


# An AF_UNIX socket's path holds at most 107 bytes (103 on macOS); the fork server's is made under
# TMPDIR (pymp-*/listener-*: 32 more), so a deep TMPDIR (a job's scratch, a test's tmp_path) failed
# with "AF_UNIX path too long". As Python 3.13 does, a short system directory holds it then.
_SOCKET_DIR_MAX = 103 - len("/pymp-12345678/listener-12345678")


def short_socket_directory() -> None:
    """multiprocessing's directory for its sockets, in a short system directory where TMPDIR is too deep."""
    from multiprocessing import process, util

    if "tempdir" in process.current_process()._config or len(tempfile.gettempdir()) <= _SOCKET_DIR_MAX:
        return  # (made already, or short enough)
    for base in ("/tmp", "/var/tmp"):
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            saved, tempfile.tempdir = tempfile.tempdir, base
            try:
                util.get_temp_dir()  # made now, and removed at exit as multiprocessing removes its own
            finally:
                tempfile.tempdir = saved
            return


def use_fork_server() -> None:
    """Ranks fork from a server that preloaded the framework (the user's script stays out: see
    main_module)."""
    short_socket_directory()
    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["framework.launch.quick_server_exit", "__main__", "framework.rank.run"]
    )


def start_fork_server(keep_main: bool = False) -> None:
    """Start the ranks' fork server now: it imports torch and the framework in a process of its
    own (seconds) while this one validates the config and writes its files. The first launch
    then finds it running; later launches reuse it as before."""
    standard_start_method()
    from multiprocessing import forkserver

    use_fork_server()
    environment_changes()  # the server's environment is this one: later changes travel with each launch
    with ranks_without_main(keep_main):
        forkserver.ensure_running()  # returns once the server process exists; it imports in the background


def forget_parents_server() -> None:
    """In a process forked from one that started the fork server (a job of a packed sweep): that
    server is not this process's child, so it cannot be watched from here; the first launch here
    starts its own."""
    global _SERVER_ENV
    from multiprocessing import forkserver

    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        server._inherited_fds = None
    _SERVER_ENV = None


def asks_for_several_devices(args: list[str]) -> bool:
    """A guess from the command line alone, before Hydra composes it: ``trainer.devices=N`` with
    some N > 1 (``trainer.devices=1,2`` in a sweep too)."""
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "trainer.devices" and any(int(n) > 1 for n in re.findall(r"\d+", value)):
            return True
    return False


# What every job imports: seconds each, paid once by the server instead of by every job.
JOB_MODULES = [
    "framework.launch.packed_job",
    "framework.job.run",
    "torch._dynamo",
    "torch.utils.tensorboard",
]
PRELOAD = ["framework.launch.quick_server_exit", *JOB_MODULES]


def start_from_command_line(args: list[str]) -> None:
    """The server that forks the jobs (a packed sweep) or the ranks (several devices), started
    from the command line alone: it imports torch while Hydra composes and the config is checked."""
    if asks_for_packed(args):  # the jobs start their own ranks' servers
        start_job_server()
    elif asks_for_several_devices(args):
        start_fork_server()


def asks_for_packed(args: list[str]) -> bool:
    """The command line selects the packed launcher for a multirun (its own config might too:
    then the server starts at the launch, later)."""
    return "hydra/launcher=packed" in args and bool({"-m", "--multirun"} & set(args))


def start_job_server() -> None:
    """Start the sweep's job server now; it imports in the background (the first job waits for it).
    A job from it gets its Hydra state by value (the sweep config, the launcher's environment) and
    its task function by name; a task function without one (a script's own, a closure) makes the
    launcher fork its jobs from itself instead (packed_job.run_packed_job)."""
    from multiprocessing import forkserver

    standard_start_method()
    short_socket_directory()
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()
