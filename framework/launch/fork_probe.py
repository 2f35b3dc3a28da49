"""Can a process forked from this one run autograd? Not once this process's autograd engine has
started its threads (a compiled model's backward starts them, even on the CPU): the fork's first
backward then fails ("Unable to handle autograd's threading in combination with fork-based
multiprocessing"), or hangs. Torch gives no way to ask, so a throwaway fork tries one backward."""

from __future__ import annotations

import os
import time


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
