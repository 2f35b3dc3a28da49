"""How a process of the framework ends once its job is done (results written, process group
left): without the interpreter's teardown."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading


def exit_now(code: int = 0) -> None:
    """Leave without the interpreter's teardown, as multiprocessing's fork server ends its
    children: there, torch's C++ objects (gloo's threads, kept alive by reference cycles until
    then) can be destroyed in an order that aborts the process ("terminate called without an
    active exception", SIGABRT), and the launcher reports a failed rank after a finished job."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: nothing more to write there
            pass
    os._exit(code)


def finish_program(code: int = 0) -> None:
    """End a command-line program whose work is done as the interpreter would, less its teardown
    (freeing every module and object: about 0.8 s once torch and dynamo are imported): the
    steps before it happen as at a normal exit, in its order (Python's ``Py_FinalizeEx``)."""
    # the interpreter's own first step: threading's atexit hooks (joblib's and concurrent's
    # executors stop their workers there), then every thread that is not a daemon is joined
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    exit_now(code)
