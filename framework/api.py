"""The Python API, for notebooks, scripts and tests: ``cfg = compose([...]); results = fit(cfg)``;
``evaluate`` and ``predict`` a saved checkpoint; ``build_trainer`` to drive the engine yourself."""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Iterable, Optional

from omegaconf import DictConfig, open_dict

from framework.cli.compose import compose
from framework.config import ConfigError
from framework.job.naming import set_job_fields
from framework.job.run import run_job
from framework.launch.main_module import GUARD_MESSAGE, interactive_main, reimported_by_a_rank

__all__ = ["build_trainer", "compose", "evaluate", "fit", "predict"]

# What the command line's hints say, in the API's words.
_API_SPELLING = {"(hydra.run.dir=...)": "(fit(cfg, output_dir=...))", "set overwrite=true": "pass overwrite=True"}


def fit(
    cfg: DictConfig, output_dir: Optional[str] = None, overwrite: bool = False, verbose: Optional[bool] = None
) -> dict:
    """Validate and run ``cfg``; returns the contents of results.json.

    ``output_dir`` defaults to ``outputs/api/<date>/<time>``; a directory that holds a run
    already is refused unless ``overwrite=True`` (or the run resumes it, ``ckpt_path=last``).
    Raises ConfigError before anything is written (but train.log) when the config is invalid.
    ``verbose``: rank 0's log lines on the console too (None: not in a notebook, where the
    progress and the results are what a cell shows; train.log has them all). When it returns
    or raises, this process's environment, signal handlers, logging and threads are as before.
    """
    caller = sys._getframe(1).f_globals
    if reimported_by_a_rank(caller):
        message = GUARD_MESSAGE.format(script=caller.get("__file__"))
        print(message, file=sys.stderr)  # a rank's start-up error would not show it otherwise
        raise RuntimeError(message)
    cfg = cfg.copy()
    output_dir = str(
        output_dir or cfg.get("output_dir") or Path("outputs/api") / _dt.datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")
    )
    set_job_fields(cfg, output_dir)
    if overwrite:
        with open_dict(cfg):
            cfg.overwrite = True
    with _process_kept():
        _for_this_process(verbose)  # (first: the log's console handler follows it)
        with _log_to(Path(output_dir) / "train.log"):
            try:
                return run_job(cfg)
            except ConfigError as err:
                raise ConfigError([_in_api_words(p) for p in err.problems]) from None


def evaluate(
    ckpt_path: str,
    overrides: Iterable[str] = (),
    output_dir: Optional[str] = None,
    mode: str = "eval",
    verbose: Optional[bool] = None,
) -> dict:
    """Test the checkpoint ``ckpt_path`` with its run's saved config and ``overrides``
    (``mode="predict"``: predict with it); returns the evaluation's results.json. Writes to
    ``<run dir>/<mode>/<date>_<time>/`` unless ``output_dir`` is given; ``verbose`` as ``fit``'s."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from framework.config.overrides import lenient
    from framework.job.saved_run_config import EVALUATE_CONFIG, evaluation_config, run_dir_of, saved_run_config

    config_dir, args = saved_run_config(ckpt_path, list(overrides), mode)
    try:
        with initialize_config_dir(version_base="1.3", config_dir=config_dir, job_name="evaluate"):
            cfg = hydra_compose(EVALUATE_CONFIG, overrides=lenient(args))
    finally:
        shutil.rmtree(config_dir, ignore_errors=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
    output_dir = output_dir or str(run_dir_of(ckpt_path) / mode / stamp)
    return fit(evaluation_config(cfg, output_dir), output_dir=output_dir, verbose=verbose)


def predict(
    ckpt_path: str, overrides: Iterable[str] = (), output_dir: Optional[str] = None, verbose: Optional[bool] = None
) -> dict:
    """Predict with the checkpoint ``ckpt_path``; returns the run's results.json (``predictions``:
    the file and the number of samples)."""
    return evaluate(ckpt_path, overrides, output_dir, mode="predict", verbose=verbose)


def build_trainer(cfg: DictConfig, *args, **kwargs):
    """One step lower than ``fit``, one process: the seeded Trainer of ``cfg`` and its parts
    (``framework.rank.build.build_trainer``); ``trainer.fit(parts.model, parts.datamodule, ...)``."""
    from framework.config.experiment import Experiment
    from framework.rank.build import build_trainer as build

    return build(Experiment.of(cfg), *args, **kwargs)


def in_notebook() -> bool:
    """A Jupyter kernel runs this process (its __main__ is the notebook, no script file)."""
    return "ipykernel" in sys.modules and interactive_main()


def _for_this_process(verbose: Optional[bool]) -> None:
    """What the ranks read from the environment: whether rank 0 logs to the console, and which
    process may show a notebook's progress widget."""
    from framework.callbacks.progress import NOTEBOOK_PID
    from framework.rank.logs import CONSOLE_LOG

    notebook = in_notebook()
    os.environ[CONSOLE_LOG] = "1" if (verbose if verbose is not None else not notebook) else "0"
    if notebook:
        os.environ[NOTEBOOK_PID] = str(os.getpid())


@contextlib.contextmanager
def _process_kept():
    """This process as it was before a fit: its environment (seeding sets PYTHONHASHSEED, the
    ranks' settings travel in it), its signal handlers and torch's thread count."""
    import signal
    import threading

    import torch

    environ, threads = dict(os.environ), torch.get_num_threads()
    names = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1")
    main = threading.current_thread() is threading.main_thread()
    handlers = {getattr(signal, n): signal.getsignal(getattr(signal, n)) for n in names} if main else {}
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(environ)
        torch.set_num_threads(threads)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def _in_api_words(problem: str) -> str:
    for cli, api in _API_SPELLING.items():
        problem = problem.replace(cli, api)
    return problem


class _log_to:
    """The run's train.log, as the command line writes it, for the duration of one fit; and the
    console too where ``verbose`` says (as a launched rank 0 does: rank/logs.py), else its warnings
    alone, unless this process logs to the console already."""

    def __init__(self, path: Path):
        from framework.callbacks.progress import console_handler
        from framework.rank.logs import FORMAT, ConsoleWarnings, console_log

        path.parent.mkdir(parents=True, exist_ok=True)
        self.handlers: list[logging.Handler] = [logging.FileHandler(path)]
        if console_handler(logging.getLogger()) is None:
            self.handlers.append(logging.StreamHandler(sys.stdout) if console_log() else ConsoleWarnings())
        for handler in self.handlers:
            handler.setFormatter(handler.formatter or logging.Formatter(FORMAT))

    def __enter__(self):
        root = logging.getLogger()
        for handler in self.handlers:
            root.addHandler(handler)
        self.previous_level = root.level
        if root.level > logging.INFO or root.level == logging.NOTSET:
            root.setLevel(logging.INFO)

    def __exit__(self, *exc):
        root = logging.getLogger()
        for handler in self.handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(self.previous_level)
