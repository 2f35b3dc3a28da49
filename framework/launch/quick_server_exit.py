"""Imported first by a fork server (the ranks' or a packed sweep's jobs'): the server ends without
the interpreter's teardown. It leaves once its launcher has gone, and freeing torch and dynamo
module by module takes about a second, during which it still holds the launcher's stdout and
stderr open: a pipe on the command (``| tee``) would wait for it."""

from __future__ import annotations

import atexit
import os

_SERVER = os.getpid()


def _leave() -> None:
    if os.getpid() == _SERVER:  # not in a process forked from the server, which ends its own way
        os._exit(0)


atexit.register(_leave)
