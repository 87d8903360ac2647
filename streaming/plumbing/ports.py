"""TCP ports on 127.0.0.1, the two questions asked of them: which port may a server to come use
(`free_port`), and can a server bind this port now (`nobody_listens_on`)."""

from __future__ import annotations

import collections
import fcntl
import functools
import os
import random
import socket
import tempfile
import time
from pathlib import Path

__all__ = ["free_port", "nobody_listens_on"]

_HOST = "127.0.0.1"
# Ports are handed out below the kernel's ephemeral range (Linux's default 32768-60999): a port the
# kernel picks for a connection or a bind to port 0 (a Spark JVM's, a client's in another test lane)
# is never one handed out here, in the seconds before its server (a JVM starting) binds it.
_LOWEST = 10_000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Another process handing out ports the same way (a parallel test lane) is kept off a port by a lock
# on its file, held long enough for the server it is for to bind it; then that server's listener
# keeps the port taken.
_CLAIMS = Path(tempfile.gettempdir()) / "fleetwatch-ports"
_CLAIM_S = 180.0
_claims: collections.deque[tuple[float, int]] = collections.deque()

# Ports handed out by this process: a port is free only until someone binds it, and the kernel hands
# a just-released ephemeral port out again, so two servers given ports before either started got the
# same one (measured: a 3-node KRaft cluster's node 2 with its PLAINTEXT and CONTROLLER listeners on
# one port, with four clusters built at once). A port is never handed out twice.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port below the ephemeral range that nobody listens on, that this process has not handed out
    before and that no other process handed out in the last `_CLAIM_S` seconds."""
    _release_old_claims()
    highest = _ephemeral_floor()
    _CLAIMS.mkdir(exist_ok=True)
    for _ in range(10_000):
        port = random.randrange(_LOWEST, highest)
        if port in _HANDED_OUT or not nobody_listens_on(port):
            continue
        fd = os.open(_CLAIMS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process claimed it
            os.close(fd)
            continue
        _HANDED_OUT.add(port)
        _claims.append((time.monotonic(), fd))
        return port
    raise RuntimeError(f"no free port between {_LOWEST} and {highest}")


@functools.cache  # the kernel's setting, read once, not at every port handed out
def _ephemeral_floor() -> int:
    """The lowest port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return max(int(_RANGE_FILE.read_text().split()[0]), _LOWEST + 1000)
    except (OSError, ValueError, IndexError):
        return 32768


def _release_old_claims() -> None:
    while _claims and time.monotonic() - _claims[0][0] > _CLAIM_S:
        os.close(_claims.popleft()[1])


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
