"""Keep the ranks from re-running the user's script, and ask whether ranks forked from this process
can run autograd (``autograd_survives_fork``, at the end).

Python starts a forkserver or spawn child by importing the parent's ``__main__`` again (as
``__mp_main__``), so that objects defined there unpickle. A script that calls
``framework.fit`` at module level, without ``if __name__ == "__main__":``, would then fit
again inside every rank. The ranks need nothing from ``__main__`` (they get a plain config
and import every ``_target_``), unless the config names a class defined in the script."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from framework.config.experiment import Experiment

# What a rank that failed while importing the user's script is told (its traceback is on the console).
STARTUP_HINT = (
    "the config names a class defined in your script (_target_: __main__...), which every rank "
    'imports: a script that calls fit() needs `if __name__ == "__main__":`'
)
GUARD_MESSAGE = (
    "framework.fit() ran again while a rank process imported your script {script!r}: the config "
    "names a class defined in that script (_target_: __main__...), so every rank imports it. Put the "
    'call under `if __name__ == "__main__":`, or move the class into a module of its own.'
)


@contextlib.contextmanager
def ranks_without_main(keep_main: bool = False):
    """While ranks start, ``__main__`` looks like an interactive session to multiprocessing,
    so the children do not import it (unless ``keep_main``: the config needs a ``__main__.`` target)."""
    main = sys.modules.get("__main__")
    if main is None or keep_main:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        main.__dict__.update(saved)


def interactive_main() -> bool:
    """Is ``__main__`` a notebook kernel or an interactive session (no script file to import)?"""
    main = sys.modules.get("__main__")
    return main is not None and not getattr(main, "__file__", None)


def forks_ranks(run: Experiment, launcher: str) -> bool:
    """Do the local ranks of ``run`` start as forks of this process: a fork strategy, or
    classes defined in an interactive ``__main__`` that no other start could import."""
    return launcher == "fork" or (launcher == "elastic" and needs_main(run) and interactive_main())


def needs_main(run: Experiment) -> bool:
    """Does the config name a class or function defined in the user's script?"""
    return "__main__." in json.dumps(run.config, default=str)


def reimported_by_a_rank(caller_globals: dict) -> bool:
    """Is this call running inside a child's re-import of the user's script?"""
    return caller_globals.get("__name__") == "__mp_main__"


# Can a process forked from this one run autograd? Not once this process's autograd engine has
# started its threads (a compiled model's backward starts them, even on the CPU): the fork's first
# backward then fails ("Unable to handle autograd's threading in combination with fork-based
# multiprocessing"), or hangs. Torch gives no way to ask, so a throwaway fork tries one backward.
def autograd_survives_fork(timeout_s: float = 20.0) -> bool:
    """True when a fork of this process ran a backward and exited cleanly within ``timeout_s``."""
    import torch

    pid = os.fork()
    if pid == 0:  # the probe: one backward, then out without the parent's exit handlers
        code = 1
        try:
            torch.ones(1, requires_grad=True).sum().backward()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.01)
    os.kill(pid, 9)  # a hung backward counts as a failed one
    os.waitpid(pid, 0)
    return False
