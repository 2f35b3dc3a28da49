"""One job of a packed sweep in a process of its own, forked from the launcher or from the job
server (launch/servers.py): held to its devices, then Hydra's ``run_job`` as the basic launcher
calls it; its JobReturn goes back through a pipe. Forked from the launcher, it keeps Hydra's state
and the task function without pickling either; from the server, it gets them by value and by name.
"""

from __future__ import annotations

import importlib
import os
import signal
from typing import Callable, Optional

from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals

from framework.config.environment import PACKED_JOB
from framework.engine.signals import watch_parent
from framework.launch.packed_devices import hold_to
from framework.launch.process_exit import exit_now
from framework.launch.servers import forget_parents_server


def run_packed_job(
    conn, hydra_context, task_function, sweep_config, kind: str, devices: list[int], launcher: int | None = None
) -> None:
    """The child's whole life: its devices, its signals, its job, its answer (``launcher``: the
    launcher's pid, where it is not this process's parent)."""
    for signum in (signal.SIGTERM, signal.SIGINT):  # the launcher's handlers are the launcher's
        signal.signal(signum, signal.SIG_DFL)
    # a launcher killed outright: the job stops (last saved) instead of running on alone
    watch_parent(launcher=launcher)
    hold_to(kind, devices)
    os.environ[PACKED_JOB] = "1"  # the job leaves the sweep's report to the launcher
    forget_parents_server()
    setup_globals()
    code = 0
    try:
        ret = run_job(
            hydra_context=hydra_context,
            task_function=task_function,
            config=sweep_config,
            job_dir_key="hydra.sweep.dir",
            job_subdir_key="hydra.sweep.subdir",
        )
    except SystemExit as stop:  # a job stopped by a signal exits 128 + signal, after recording itself
        code = stop.code if isinstance(stop.code, int) else 1
        ret = failed_return(sweep_config, RuntimeError(f"the job exited with status {code}"))
    _send(conn, ret, sweep_config)
    exit_now(code)  # not the launcher's atexit handlers, inherited by the fork


def failed_return(sweep_config, error: BaseException) -> JobReturn:
    """The return of a job that did not end in its task function's answer."""
    ret = JobReturn(
        overrides=list(sweep_config.hydra.overrides.task),
        cfg=sweep_config,
        hydra_cfg=sweep_config,
        working_dir=os.getcwd(),
    )
    ret.status, ret.return_value = JobStatus.FAILED, error
    return ret


def _send(conn, ret: JobReturn, sweep_config) -> None:
    try:
        conn.send(ret)
    except Exception as err:  # noqa: BLE001 - an exception that does not pickle: send its words
        conn.send(
            failed_return(
                sweep_config,
                RuntimeError(f"{type(ret.return_value).__name__}: {ret.return_value} (not picklable: {err})"),
            )
        )
    conn.close()


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
    from hydra.core.utils import JobRuntime, configure_log
    from hydra.types import HydraContext

    os.environ.clear()
    os.environ.update(environ)
    configure_log(sweep_config.hydra.hydra_logging, sweep_config.hydra.verbose)  # the launcher's, until the job's
    JobRuntime.instance().set("name", sweep_config.hydra.job.name)
    # run_job reads only the callbacks of a HydraContext (the config loader stays in the launcher).
    context = HydraContext(config_loader=None, callbacks=Callbacks(sweep_config))
    run_packed_job(conn, context, _resolve(*task), sweep_config, kind, devices, launcher)
