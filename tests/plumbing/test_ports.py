"""streaming/plumbing/ports.py with real sockets: a port handed out once, and "nobody listens" as a server that
binds the port next sees it (a stopped server's TIME_WAIT connections do not count, a listener does)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.plumbing.ports import free_port, nobody_listens_on

HOST = "127.0.0.1"


def _listener(*, reuse_port: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # as Tansu binds
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((HOST, 0))
    sock.listen(8)
    return sock


def test_a_port_is_handed_out_once_and_nothing_listens_on_it():
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(nobody_listens_on(port) for port in ports[:20])


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_listener_is_someone(reuse_port):
    with _listener(reuse_port=reuse_port) as listener:
        assert not nobody_listens_on(listener.getsockname()[1])


def test_the_time_wait_connections_of_a_stopped_server_are_nobody():
    listener = _listener()
    port = listener.getsockname()[1]
    client = socket.create_connection((HOST, port))
    accepted, _ = listener.accept()
    listener.close()
    accepted.close()  # the server's side closes first: its connection waits in TIME_WAIT on `port`
    client.close()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as plain, pytest.raises(OSError):
        plain.bind((HOST, port))  # the check the bus made before: it refused to restart on its port
    assert nobody_listens_on(port)


def test_ports_come_from_below_the_ephemeral_range_and_no_other_process_gets_one_while_claimed():
    """A port the kernel picks for a connection or a bind to 0 (another lane's JVM or client) is never one
    handed out here, and a parallel process handing out ports skips those this one claimed (before, both
    came from the ephemeral range: a fresh clone's healthy real cluster failed to start once in four)."""
    ours = {free_port() for _ in range(300)}
    floor = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(10_000 <= port < floor for port in ours)
    child = subprocess.run([sys.executable, "-c", "from streaming.plumbing.ports import free_port\n"
                            "print(*[free_port() for _ in range(2000)])"],
                           capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    theirs = set(map(int, child.stdout.split()))
    assert len(theirs) == 2000 and not theirs & ours
