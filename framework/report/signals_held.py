"""A sweep's report written whole: SIGTERM and SIGINT held while it is written (a second or two,
the plots), then delivered as they came, so a sweep stopped as it ends still leaves report.md."""

from __future__ import annotations

import contextlib
import signal
import threading

HELD = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def signals_held(signums=HELD):
    """Within it, ``signums`` wait; after it, each one that came is raised again, for the handler the
    process had (the default one: the launcher ends with its status, 128 + the signal)."""
    if threading.current_thread() is not threading.main_thread():  # (only the main thread handles signals)
        yield
        return
    came: list[int] = []
    previous = {s: signal.getsignal(s) for s in signums}
    for signum in signums:
        signal.signal(signum, lambda number, frame: came.append(number))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        for signum in dict.fromkeys(came):
            signal.raise_signal(signum)
