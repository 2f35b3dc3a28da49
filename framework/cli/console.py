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
from framework.config.optional_modules import not_installed
from framework.config.overrides import lenient
from framework.config.writable import unwritable
from framework.launch.process_exit import exit_now, finish_program
from framework.launch.servers import start_from_command_line

# Flags with which Hydra answers without running the job.
_NO_RUN_FLAGS = {"--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--shell-completion", "-sc"}


# The entry-point group under which a package names the Hydra plugins it brings (this one's:
# pyproject.toml); each is registered with Hydra before it composes.
PLUGIN_ENTRY_POINTS = "framework.hydra_plugins"


def _register_plugins() -> None:
    """Hydra finds plugins by scanning the ``hydra_plugins`` package, which an editable install
    (setuptools' import hook) hides from its scan: register the plugins that installed packages
    name under PLUGIN_ENTRY_POINTS by hand (harmless when found). A plugin whose base does not
    import (the SLURM launcher without hydra-submitit-launcher) is not registered."""
    from importlib.metadata import entry_points

    from hydra.core.plugins import Plugins
    from hydra.plugins.plugin import Plugin

    plugins = Plugins.instance()  # first: its scan re-executes Hydra's core plugins, BasicSweeper among them
    for entry in entry_points(group=PLUGIN_ENTRY_POINTS):
        try:
            plugin = entry.load()
        except ImportError:
            continue
        if isinstance(plugin, type) and issubclass(plugin, Plugin):
            plugins.register(plugin)


def cwd_importable() -> None:
    """As ``python -m framework.train`` does: the user's modules in the current directory import."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())


# The Hydra plugins an option needs, and the extra of this package that installs them.
_PLUGINS = {
    "hydra/sweeper=optuna": "hydra_plugins.hydra_optuna_sweeper",
    "hydra/sweeper=optuna_study": "hydra_plugins.hydra_optuna_sweeper",
    "hparams_search=digits_optuna": "hydra_plugins.hydra_optuna_sweeper",
    "hydra/launcher=joblib": "hydra_plugins.hydra_joblib_launcher",
    "hydra/launcher=slurm": "hydra_plugins.hydra_submitit_launcher",
    "hydra/launcher=slurm_local": "hydra_plugins.hydra_submitit_launcher",
}


def missing_plugins(args: list[str]) -> list[str]:
    """The options on the command line whose Hydra plugin is not installed, with what to install
    (Hydra itself only says it "could not find" the option)."""
    modules = {arg: _PLUGINS.get(arg.lstrip("+~")) for arg in args}
    return [not_installed(arg, module) for arg, module in modules.items() if module and _missing_plugin(module)]


def _missing_plugin(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


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
    if env is None and not set(sys.argv[1:]) & _NO_RUN_FLAGS:
        start_from_command_line(sys.argv[1:])
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
