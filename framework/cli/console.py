"""The console entry of the Hydra apps (framework.train, framework.evaluate): it prepares the
command line and Hydra, and imports nothing heavy, so that ``--help``, ``--cfg`` and shell
completion answer without importing torch."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable

from framework.cli import hydra_fast_paths
from framework.config.environment import detect_environment
from framework.config.group_choices import null_selections, unknown_options
from framework.config.overrides import lenient
from framework.config.writable import unwritable
from framework.launch.fork_server import asks_for_several_devices, start_fork_server
from framework.launch.process_exit import exit_now, finish_program

# Flags with which Hydra answers without running the job.
_NO_RUN_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}


def _register_plugins() -> None:
    """Hydra finds plugins by scanning the ``hydra_plugins`` package, which an editable install
    (setuptools' import hook) hides from its scan: register ours by hand (harmless when found)."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    plugins = Plugins.instance()  # first: its scan re-executes Hydra's core plugins, BasicSweeper among them
    from hydra_plugins.framework_packed.packed_launcher import PackedLauncher
    from hydra_plugins.framework_sweeper.sweeper import FrameworkSweeper

    plugins.register(PackedLauncher)
    plugins.register(FrameworkSweeper)
    try:
        from hydra_plugins.framework_slurm.slurm_sweep import SlurmSweepLauncher
    except ImportError:
        return
    if issubclass(SlurmSweepLauncher, Launcher):  # hydra-submitit-launcher is installed
        plugins.register(SlurmSweepLauncher)


def cwd_importable() -> None:
    """As ``python -m framework.train`` does: the user's modules in the current directory import."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


# The Hydra plugins an option needs, and the extra of this package that installs them.
_PLUGINS = {
    "hydra/sweeper=optuna": "hydra_plugins.hydra_optuna_sweeper",
    "hparams_search=digits_optuna": "hydra_plugins.hydra_optuna_sweeper",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=slurm": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm_local": "hydra_plugins.hydra_submitit_launcher",
}


def missing_plugins(args: list[str]) -> list[str]:
    """The options on the command line whose Hydra plugin is not installed, with what to install
    (Hydra itself only says it "could not find" the option)."""
    import importlib.util

    missing = []
    for arg in args:
        module = _PLUGINS.get(arg.lstrip("+~"))
        if module and importlib.util.find_spec(module) is None:
            missing.append(
                f"{arg}: needs {module.split('.')[1].replace('_', '-')}, which is not installed; "
                "pip install 'framework[sweep]' (or the package itself)"
            )
    return missing


def unwritable_run_dirs(args: list[str]) -> list[str]:
    """``hydra.run.dir`` / ``hydra.sweep.dir`` that cannot be created (Hydra would fail on them with
    a traceback, creating its log file)."""
    dirs = {
        a.lstrip("+").split("=", 1)[0]: a.split("=", 1)[1]
        for a in args
        if a.lstrip("+").startswith(("hydra.run.dir=", "hydra.sweep.dir="))
    }
    return [p for key, value in dirs.items() if "$" not in value for p in [unwritable(key, Path(value))] if p]


def console_entry(hydra_main: Callable[[], None]) -> None:
    """Run a ``@hydra.main`` function from a console script: typo'd keys go to our validator,
    the current directory is importable, and under torchrun/SLURM only rank 0 owns Hydra's run
    directory. The entry point calls ``end_program`` once it has cleaned up."""
    sys.argv[1:] = lenient(sys.argv[1:])
    args = sys.argv[1:]
    missing = missing_plugins(args) + unknown_options(args) + null_selections(args) + unwritable_run_dirs(args)
    if missing:
        print("\n".join(missing), file=sys.stderr)
        exit_now(2)
    _register_plugins()
    hydra_fast_paths.install()
    cwd_importable()
    env = detect_environment()
    _start_early(env, sys.argv[1:])
    scratch = None
    if env is not None and env.rank != 0:
        # Every rank runs the entry point. Only rank 0's Hydra run dir is the job's (ranks agree
        # on it in framework.rank); the others get a scratch dir and log under <job dir>/ranks/<r>/.
        scratch = tempfile.mkdtemp(prefix=f"framework-rank{env.rank}-")
        sys.argv += [f"hydra.run.dir={scratch}"]
    try:
        hydra_main()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


def _start_early(env, args: list[str]) -> None:
    """The server that forks the jobs or the ranks, started now: it imports torch while Hydra
    composes and the config is validated here."""
    if env is not None or set(args) & _NO_RUN_FLAGS:
        return
    from hydra_plugins.framework_packed.job_server import asks_for_packed, start_job_server

    if asks_for_packed(args):  # the jobs start their own ranks' servers
        start_job_server()
    elif asks_for_several_devices(args):
        start_fork_server({})


def end_program() -> None:
    """The end of a command whose job is done: called by the entry points last, after their own
    clean-up. A rank of torchrun/srun/horovodrun leaves at once (see ``exit_now``); a command the
    user started ends as Python would, less the interpreter's teardown (``finish_program``)."""
    env = detect_environment()
    if env is not None and env.world_size > 1:
        exit_now(0)
    if _is_the_program():
        finish_program(0)


def _is_the_program() -> bool:
    """Whether this process was started as one of the framework's commands (``framework-train``,
    ``python -m framework.train``, ...), not by a program that calls its ``main`` and goes on."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return (getattr(main_spec, "name", "") or "").startswith("framework.") or os.path.basename(sys.argv[0]).startswith(
        "framework-"
    )
