"""What torch's elastic agent leaves in the process that launches it, taken back when the launch
ends: the signal handlers it installs and its TORCHELASTIC_SIGNALS_TO_HANDLE (afterwards Ctrl-C
would raise its SignalException, a notebook kernel's shutdown print its traceback), and, when a
signal ends the launch, the rendezvous it keeps open (a keep-alive thread and its store) for a
later scaling event that a one-off local launch never has; and the directory of the ranks' error
files (by default torch makes a torchelastic_* directory in TMPDIR per launch and leaves it there:
thousands of them after a few sweeps)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading

# The c10d rendezvous, under a name of ours so that the launch knows the handlers it created.
RENDEZVOUS_BACKEND = "framework-c10d"
# The signals torch's agent takes over in the launching process (its TORCHELASTIC_SIGNALS_TO_HANDLE).
AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1")
_created: list = []


@contextlib.contextmanager
def agent_leftovers_taken_back():
    """For one launch with ``rdzv_backend=RENDEZVOUS_BACKEND``: this process as it was before it.
    Yields the directory for the agent's ``logs_specs`` (its failures read their error files
    before the launch returns)."""
    _register_backend()
    main = threading.current_thread() is threading.main_thread()
    handlers = {getattr(signal, n): signal.getsignal(getattr(signal, n)) for n in AGENT_SIGNALS} if main else {}
    previous = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE")
    first = len(_created)
    scratch = tempfile.mkdtemp(prefix="framework-agent-")
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        if previous is None:
            os.environ.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
        else:
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = previous
        for handler in _created[first:]:
            handler.shutdown()  # again, after a launch that ended well: closing twice is harmless
        del _created[first:]


def _register_backend() -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    registry.register(RENDEZVOUS_BACKEND, _tracked_c10d_handler)  # once: the same creator again is a no-op


def _tracked_c10d_handler(params):
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    handler = _Named(
        registry.create_handler(
            RendezvousParameters(
                "c10d",
                params.endpoint,
                params.run_id,
                params.min_nodes,
                params.max_nodes,
                params.local_addr,
                **params.config,
            )
        )
    )
    _created.append(handler)
    return handler


class _Named:
    """torch's c10d handler, answering to our backend's name (the registry checks that name)."""

    def __init__(self, handler):
        self._handler = handler

    def get_backend(self) -> str:
        return RENDEZVOUS_BACKEND

    def __getattr__(self, name: str):
        return getattr(self._handler, name)
