"""The process that forks the local ranks (multiprocessing's fork server), and starting it
early: it imports torch and the framework once, in a process of its own, which takes seconds;
started while this process still composes and validates the config, that time overlaps.

Light on purpose (no torch): the console entry starts it before Hydra composes anything when
the command line asks for several devices.
"""

from __future__ import annotations

import os
import re

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
    import multiprocessing

    if multiprocessing.get_start_method(allow_none=True) not in (None, "spawn", "fork", "forkserver"):
        multiprocessing.set_start_method("spawn", force=True)


def use_fork_server() -> None:
    """Ranks fork from a server that preloaded the framework (the user's script stays out: see
    main_module)."""
    import multiprocessing

    multiprocessing.get_context("forkserver").set_forkserver_preload(
        ["framework.launch.quick_server_exit", "__main__", "framework.rank.run"]
    )


def start_fork_server(container: dict) -> None:
    """Start the ranks' fork server now: it imports torch and the framework in a process of its
    own (seconds) while this one validates the config and writes its files. The first launch
    then finds it running; later launches reuse it as before."""
    standard_start_method()
    from multiprocessing import forkserver

    use_fork_server()
    environment_changes()  # the server's environment is this one: later changes travel with each launch
    with ranks_without_main(container):
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
