"""TCP ports on 127.0.0.1, the two questions asked of them: which port may a server to come use
(`free_port`), and can a server bind this port now (`nobody_listens_on`)."""

from __future__ import annotations

import socket

__all__ = ["free_port", "nobody_listens_on"]

_HOST = "127.0.0.1"

# Ports handed out by this process: a port is free only until someone binds it, and the kernel hands
# a just-released ephemeral port out again, so two servers given ports before either started got the
# same one (measured: a 3-node KRaft cluster's node 2 with its PLAINTEXT and CONTROLLER listeners on
# one port, with four clusters built at once). A port is never handed out twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nothing was bound to a moment ago and this process has not handed out before (another
    process may still take it before the server it is for binds it)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((_HOST, 0))
            port = int(sock.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def nobody_listens_on(port: int) -> bool:
    """True when a server can bind `port` now: no socket listens on it.

    The bind sets SO_REUSEADDR, as servers do (Tansu, Kafka, Python's HTTP servers): the connections
    a stopped server leaves in TIME_WAIT for a minute then do not count, as they do not for the
    server that binds the port next. A listener does, SO_REUSEPORT or not (Tansu binds with it: a
    second Tansu on a taken port would start "fine" and the kernel spread connections over the two).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
        return True
