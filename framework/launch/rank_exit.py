"""How a rank process ends once its job is done (results written, process group left)."""
from __future__ import annotations

import logging
import os
import sys


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
