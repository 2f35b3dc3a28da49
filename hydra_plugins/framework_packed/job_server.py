"""Where a packed sweep's jobs start: a fork server (multiprocessing's) that imports torch, dynamo
and the framework once, in a process of its own. Started at the command line, those seconds
overlap Hydra composing the sweep in this process, where the basic launcher's first job pays them
after it; the launcher itself never imports torch.

A job from the server gets its Hydra state by value (the sweep config, the launcher's environment)
and its task function by name; a task function without one (a script's own, a closure) makes
the launcher fork its jobs from itself instead (job_process.run_packed_job), as it did before.
Light on purpose (no torch): the console entry imports it before Hydra starts.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
from typing import Callable, Optional

from hydra.core.utils import JobRuntime, configure_log
from hydra.types import HydraContext

from framework.launch.fork_server import standard_start_method
from hydra_plugins.framework_packed.job_process import run_packed_job

# What every job imports: seconds each, paid once by the server instead of by every job.
JOB_MODULES = [
    "hydra_plugins.framework_packed.job_process",
    "framework.job.run",
    "torch._dynamo",
    "torch.utils.tensorboard",
]
PRELOAD = ["framework.launch.quick_server_exit", *JOB_MODULES]


def asks_for_packed(args: list[str]) -> bool:
    """The command line selects the packed launcher for a multirun (its own config might too:
    then the server starts at the launch, later)."""
    return "hydra/launcher=packed" in args and bool({"-m", "--multirun"} & set(args))


def start_job_server() -> None:
    """Start the server now; it imports in the background (the first job waits for it)."""
    from multiprocessing import forkserver

    standard_start_method()
    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()


def task_name(task_function: Callable) -> Optional[tuple[str, str]]:
    """(module, qualified name) that import back to this task function, or None."""
    module, qualname = getattr(task_function, "__module__", None), getattr(task_function, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        return (module, qualname) if _resolve(module, qualname) is task_function else None
    except (ImportError, AttributeError):
        return None


def _resolve(module: str, qualname: str) -> Callable:
    """The function itself, under ``@hydra.main``'s wrapper (which holds the module's name)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    while hasattr(found, "__wrapped__"):
        found = found.__wrapped__
    return found


def run_served_job(
    conn, task: tuple[str, str], sweep_config, kind: str, devices: list[int], environ: dict, launcher: int
) -> None:
    """A job forked from the server: the launcher's environment and Hydra's job state, then the
    job as a forked one runs it, watching the launcher (its pid ``launcher``): its
    parent is the server, which a launcher killed outright leaves running while any job holds
    the server's lifeline."""
    from hydra._internal.callbacks import Callbacks

    os.environ.clear()
    os.environ.update(environ)
    configure_log(sweep_config.hydra.hydra_logging, sweep_config.hydra.verbose)  # the launcher's, until the job's
    JobRuntime.instance().set("name", sweep_config.hydra.job.name)
    # run_job reads only the callbacks of a HydraContext (the config loader stays in the launcher).
    context = HydraContext(config_loader=None, callbacks=Callbacks(sweep_config))
    run_packed_job(conn, context, _resolve(*task), sweep_config, kind, devices, launcher)
