"""The stores of a local launch listen on the loopback interface only.

torch's elastic agent creates two TCPStore servers for a job on this machine (the c10d
rendezvous' and the store it shares with the ranks). A TCPStore server binds every interface
(IPv4 and IPv6) whatever host it is given: anyone who can reach the machine could read and write
the rendezvous keys. While local ranks start, ``stores_listening_on`` hands each new server a
socket it bound itself to ``host`` (TCPStore's ``master_listen_fd``), so the store hears only
there. Clients and everything else are unchanged.
"""

from __future__ import annotations

import contextlib
import socket


def _listening_socket(host: str, port: int) -> int | None:
    """A socket listening on ``host``:``port`` (0: any free port), detached; None when the port is
    taken (a multi-tenant store of this process already serves it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        return None
    sock.listen(1024)
    return sock.detach()


@contextlib.contextmanager
def stores_listening_on(host: str = "127.0.0.1"):
    """Within the block, TCPStore servers created by torch's elastic rendezvous listen on ``host``."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    real = dist.TCPStore

    class BoundStore(real):  # type: ignore[misc, valid-type]
        def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kwargs):
            if is_master and kwargs.get("master_listen_fd") is None:
                kwargs["master_listen_fd"] = _listening_socket(host, int(port))
            super().__init__(host_name, port, world_size, is_master, *args, **kwargs)

    dist.TCPStore = c10d_rendezvous_backend.TCPStore = BoundStore
    try:
        yield
    finally:
        dist.TCPStore = c10d_rendezvous_backend.TCPStore = real
