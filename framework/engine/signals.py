"""Stop signals: SIGTERM, SIGINT (and SLURM's SIGUSR1) become a request to stop at the next
step boundary, where every rank agrees, checkpoints ``last`` and records ``interrupted``.

A second signal ends the process at once, as the default handler would. Signals within
``DUPLICATE_WINDOW_S`` of the first count as that one: Ctrl-C or ``scancel`` reach every
process of the job's group, and the launcher and its fork server pass on signals of their own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Optional

from framework.config.environment import LAUNCHER_PID

log = logging.getLogger(__name__)

DUPLICATE_WINDOW_S = 2.0


class Interrupted(Exception):
    """The job stopped on a signal after saving its state; exit with ``128 + signum``."""

    def __init__(self, signum: int, results: Optional[dict] = None):
        self.signum, self.results = signum, results or {}
        super().__init__(
            f"interrupted by {signal.Signals(signum).name} at step {self.results.get('steps')}; "
            f"resume with ckpt_path=last"
        )


def stop_signals(usr1: Optional[bool]) -> list[int]:
    """SIGTERM and SIGINT; SIGUSR1 when ``usr1`` (None: when running under SLURM)."""
    chosen = [signal.SIGTERM, signal.SIGINT]
    if usr1 or (usr1 is None and "SLURM_JOB_ID" in os.environ):
        chosen.append(signal.SIGUSR1)
    return chosen


class StopNow(BaseException):
    """A stop signal while nothing is left to checkpoint (test, predict after training): the rank
    leaves the stage at once. A BaseException, as KeyboardInterrupt: no ``except Exception`` keeps it."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


# The first stop signal this process received, whichever StopSignals took it (None: none).
RECEIVED: Optional[int] = None


class StopSignals:
    """Records the first stop signal; one after the window kills at once. ``stop_at_once``: the
    first signal raises StopNow where the process is (set while a stage runs that has no step
    boundary to stop at and nothing to save)."""

    def __init__(self, signums: list[int]):
        self.signums = signums
        self.received: Optional[int] = None
        self.stop_at_once = False
        self.after_training = False  # a stage with no step boundary ran (at_once): training is over
        self._at = 0.0
        self._previous: dict[int, object] = {}
        self.forward_to: list[int] = []  # processes that get the first signal too (a launcher's ranks)

    @contextlib.contextmanager
    def at_once(self):
        """Within the block, a stop signal (or one received before it) raises StopNow."""
        if self.received is not None:
            raise StopNow(self.received)
        self.stop_at_once = self.after_training = True
        try:
            yield
        finally:
            self.stop_at_once = False

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():  # handlers live in the main thread only
            for signum in self.signums:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        global RECEIVED
        if self.received is None:
            self.received, self._at = signum, time.monotonic()
            RECEIVED = RECEIVED or signum
            for pid in self.forward_to:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            if self.stop_at_once:
                log.warning(
                    "Received %s: stopping now (training is over; what it saved stays)", signal.Signals(signum).name
                )
                raise StopNow(signum)
            log.warning(
                "Received %s: stopping at the next step, saving checkpoints/last (send it again to stop at once)",
                signal.Signals(signum).name,
            )
            return
        if time.monotonic() - self._at < DUPLICATE_WINDOW_S:
            return  # the same stop, delivered again (process group, launcher, fork server)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (dead, not yet reaped) counts as dead
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: os.kill's answer stands


# Why a rank that watch_parent stopped got its SIGTERM (results.json says it): None while the launcher lives.
LAUNCHER_GONE: str | None = None
_WATCHED: int | None = None  # the launcher's pid, once watch_parent runs


def launcher_gone() -> str | None:
    """Why this rank was stopped, if its launcher died: its own watcher's finding, or (a peer
    may have stopped this rank first, through the stop vote) the launcher's state now."""
    if LAUNCHER_GONE is None and _WATCHED is not None and not _alive(_WATCHED):
        return f"the launcher (pid {_WATCHED}) died; the ranks stopped themselves with SIGTERM"
    return LAUNCHER_GONE


def _term_on_parent_death() -> None:
    """torch's process wrapper asks the kernel for a SIGINT when this process's parent (the fork
    server) dies. When a whole job's group gets SIGTERM (scancel, preemption), that SIGINT can be
    pending beside the SIGTERM, and Python handles the lower signal number first: the run would
    record SIGINT. A parent's death is a SIGTERM here too (Linux's prctl; elsewhere nothing)."""
    try:
        import ctypes

        libc, current = ctypes.CDLL(None, use_errno=True), ctypes.c_int(0)
        libc.prctl(2, ctypes.byref(current))  # 2: PR_GET_PDEATHSIG
        if current.value == signal.SIGINT:  # only what torch asked for (srun, torchrun: left as they are)
            libc.prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def watch_parent(poll_s: float = 0.5, grace_s: float = 10.0, launcher: Optional[int] = None) -> None:
    """End this process when the process that launched it dies: a SIGTERM to itself first (the
    ranks stop together and save ``last`` if they still can), then, ``grace_s`` seconds later, an
    exit. Nothing of a job outlives its launcher. The launcher is ``launcher``, else
    FRAMEWORK_LAUNCHER_PID when set (ranks forked from a fork server, which outlives the launcher
    while they run: each child holds the server's lifeline open), else the parent."""
    global _WATCHED
    parent = _WATCHED = launcher or int(os.environ.get(LAUNCHER_PID, os.getppid()))
    _term_on_parent_death()

    def watch() -> None:
        global LAUNCHER_GONE
        while _alive(parent):
            time.sleep(poll_s)
        log.error("The launcher (pid %d) is gone: stopping this rank", parent)
        LAUNCHER_GONE = f"the launcher (pid {parent}) died; this rank stopped itself with SIGTERM"
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        log.error("Still running %.0f s after the launcher died: exiting", grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()
