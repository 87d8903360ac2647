"""The `/metrics` server's connections: a fixed pool of handler threads that takes a connection
only once its request has arrived whole.

`ThreadingHTTPServer` gives each accepted connection a thread that waits for the request as long
as the client likes: 200 idle connections held 176 threads that never ended, before any auth check
(issue 42.6). Here one thread accepts every connection and reads its request head without
blocking; a connection whose head has not arrived `request_timeout_s` after it was accepted (or
whose head grows past `MAX_HEAD`) is closed, and at most `max_connections` are open at once (past
that the oldest of those still sending goes first, else the newest). A connection whose head has
arrived goes to one of `workers` threads, which answers it with a socket timeout of
`request_timeout_s`. So the server holds 1 + `workers` threads whatever its clients do, and a
scrape is answered while idle connections wait to be closed.

A request is its head only (`/metrics` answers GET; a body is never read), and one request per
connection (HTTP/1.0, as `BaseHTTPRequestHandler` answers by default).
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

__all__ = ["MAX_HEAD", "REQUEST_TIMEOUT_S", "BoundedHTTPServer", "ReadHeadHandler"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 10.0  # a request's head must arrive within this of the accept; each read and write of the answer
MAX_HEAD = 64 * 1024  # a request line and headers longer than this: not a scrape
_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")


class ReadHeadHandler(BaseHTTPRequestHandler):
    """A `BaseHTTPRequestHandler` over a connection whose request head the server has read already:
    `request` is (socket, head bytes)."""

    def setup(self) -> None:
        self.connection, head = self.request
        self.rfile = io.BytesIO(head)
        self.wfile = self.connection.makefile("wb")

    def finish(self) -> None:
        try:
            self.wfile.flush()
        except OSError:
            pass  # the client is gone, or stopped reading past the timeout
        finally:
            self.wfile.close()
            self.rfile.close()


@dataclass
class _Pending:
    """A connection still sending its request head."""

    address: tuple
    deadline: float  # time.monotonic()
    head: bytearray = field(default_factory=bytearray)


class BoundedHTTPServer:
    """HTTP on `host:port` (0: a free port), each request answered by `handler` (a `ReadHeadHandler`)
    on one of `workers` threads; bound when made, serving from `start()` until `stop()`."""

    def __init__(self, host: str, port: int, handler: Callable[..., ReadHeadHandler], *, workers: int = 4,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = 256) -> None:
        if workers < 1 or max_connections < workers or not request_timeout_s > 0:
            raise ValueError("needs workers >= 1, max_connections >= workers and a positive request timeout")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=128)
        self._listener.setblocking(False)
        self._handler = handler
        self._timeout_s = request_timeout_s
        self._max_connections = max_connections
        self._ready: queue.SimpleQueue[tuple[socket.socket, tuple, bytes] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._answering = 0  # handed to the workers, not yet closed
        self._stopping = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._loop = threading.Thread(target=self._serve, name="fleetwatch-metrics", daemon=True)
        self._threads = [threading.Thread(target=self._work, name=f"fleetwatch-metrics-{i}", daemon=True)
                         for i in range(workers)]

    @property
    def server_address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> BoundedHTTPServer:
        for thread in (*self._threads, self._loop):
            thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting and close the connections still sending; the workers end after the answers
        they are giving (each bounded by the request timeout)."""
        self._stopping.set()
        if self._loop.ident is None:  # never started
            self._listener.close()
        else:
            self._wake_write.send(b"\0")
            self._loop.join()
            for thread in self._threads:
                thread.join(timeout=self._timeout_s)
        self._wake_write.close()
        self._wake_read.close()

    def _serve(self) -> None:
        pending: dict[socket.socket, _Pending] = {}  # in the order accepted: the order of their deadlines
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            try:
                while not self._stopping.is_set():
                    now = time.monotonic()
                    wait = max(0.0, next(iter(pending.values())).deadline - now) if pending else None
                    for key, _ in selector.select(wait):
                        if key.fileobj is self._listener:
                            self._accept(selector, pending)
                        elif key.fileobj is not self._wake_read:
                            self._read(selector, pending, key.fileobj)  # type: ignore[arg-type]
                    now = time.monotonic()
                    while pending and next(iter(pending.values())).deadline <= now:
                        self._drop(selector, pending, next(iter(pending)))
            finally:
                for conn in list(pending):
                    self._drop(selector, pending, conn)
                self._listener.close()
                for _ in self._threads:
                    self._ready.put(None)

    def _accept(self, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending]) -> None:
        while True:
            try:
                conn, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of file descriptors, say: the next round tries again
                log.warning("metrics server cannot accept a connection", extra={"error": str(exc)})
                return
            with self._lock:
                open_now = len(pending) + self._answering
            if open_now >= self._max_connections:
                if not pending:
                    conn.close()  # every open one is being answered: this one waits for none of them
                    continue
                self._drop(selector, pending, next(iter(pending)))  # the oldest still sending
            conn.setblocking(False)
            pending[conn] = _Pending(address, time.monotonic() + self._timeout_s)
            selector.register(conn, selectors.EVENT_READ)

    def _read(self, selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending],
              conn: socket.socket) -> None:
        waiting = pending[conn]
        try:
            data = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        waiting.head += data
        if not data or len(waiting.head) > MAX_HEAD:
            self._drop(selector, pending, conn)
        elif any(end in waiting.head for end in _HEAD_ENDS):
            selector.unregister(conn)
            del pending[conn]
            conn.settimeout(self._timeout_s)  # blocking again, each read and write bounded
            with self._lock:
                self._answering += 1
            self._ready.put((conn, waiting.address, bytes(waiting.head)))

    @staticmethod
    def _drop(selector: selectors.BaseSelector, pending: dict[socket.socket, _Pending], conn: socket.socket) -> None:
        selector.unregister(conn)
        del pending[conn]
        conn.close()

    def _work(self) -> None:
        while (item := self._ready.get()) is not None:
            conn, address, head = item
            try:
                self._handler((conn, head), address, self)
            except Exception:  # one bad request must not end a worker
                log.debug("metrics request failed", exc_info=True)
            finally:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_WR)
                conn.close()
                with self._lock:
                    self._answering -= 1
