"""A TCP forwarder on loopback that can cut or redirect what goes through it.

A broker whose controller connections go through a `TcpProxy` can be cut off from the
controller quorum (`cut()`: open connections are reset and new ones refused) while it keeps
serving clients on its own listener: the partitioned broker of SPEC section 1. `heal()` lets
connections through again.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

__all__ = ["TcpProxy"]


class TcpProxy:
    """Forwards `host`:`port` to `target`; one thread, non-blocking sockets."""

    def __init__(self, target: tuple[str, int], port: int = 0, host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._peers: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._cut = False
        self._stopping = False
        self.connections = 0  # accepted while healthy, for tests that check traffic goes through
        self._thread = threading.Thread(target=self._loop, name=f"tcp-proxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def cut(self) -> None:
        """Reset every open connection and refuse new ones until `heal()`."""
        with self._lock:
            self._cut = True
            for sock in list(self._peers):
                self._drop(sock)

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def retarget(self, target: tuple[str, int]) -> None:
        """Send new connections to `target` and reset the open ones: the address now leads elsewhere
        (a rolling restart that re-assigned it, SPEC's misrouted connection)."""
        with self._lock:
            self.target = target
            for sock in list(self._peers):
                self._drop(sock)

    def close(self) -> None:
        self._stopping = True
        self._thread.join(timeout=5)
        with self._lock:
            for sock in list(self._peers):
                self._drop(sock)
        self._selector.close()
        self._listener.close()

    def _drop(self, sock: socket.socket) -> None:
        peer = self._peers.pop(sock, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._peers.pop(s, None)
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.unregister(s)
            with contextlib.suppress(OSError):
                # An RST, not a FIN: the broker sees the connection fail, as on a real partition.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self._cut:
            self._peers[client] = client
            self._drop(client)
            return
        try:
            upstream = socket.create_connection(self.target, timeout=2)
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._peers[client], self._peers[upstream] = upstream, client
        self._selector.register(client, selectors.EVENT_READ, None)
        self._selector.register(upstream, selectors.EVENT_READ, None)
        self.connections += 1

    def _pump(self, sock: socket.socket) -> None:
        peer = self._peers.get(sock)
        if peer is None:
            return
        try:
            data = sock.recv(65536)
            if data:
                peer.setblocking(True)  # a short blocking write keeps the forwarder simple
                peer.sendall(data)
                peer.setblocking(False)
                return
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._drop(sock)

    def _loop(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select(timeout=0.1):
                with self._lock:
                    if key.fileobj is self._listener:
                        self._accept()
                    else:
                        self._pump(key.fileobj)  # type: ignore[arg-type]
