"""A real HTTP webhook receiver on 127.0.0.1: what a team's alert endpoint is to the notifier.

The one receiver of the project: the demo's (streaming/demo/webhook.py: signatures checked, alerts
recorded), the README screenshots', the outage bench's (in a process of its own, killed and started
again on its port) and the notifier tests' (answers scripted) are each an `answer` function over it.
`answer(request)` runs on the request's own thread, so it may take its time (a slow or hanging
endpoint) without holding up other requests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["MAX_BODY", "Reply", "Request", "WebhookReceiver"]

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # a longer body is not read: `answer` gets its declared length and no bytes


@dataclass(frozen=True)
class Request:
    path: str
    headers: Mapping[str, str]  # names in lower case
    body: bytes
    length: int  # the declared Content-Length
    t: float  # time.monotonic() when it was received


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    # Started again on the port of one that stopped (its connections still in TIME_WAIT).
    allow_reuse_address = True
    daemon_threads = True


class WebhookReceiver:
    """POSTs on `host:port` (0: a free port), each answered by `answer`. Bound when made; serving
    once `start()`ed (on a thread; or as a context manager) or while `serve_forever()` runs."""

    def __init__(self, answer: Callable[[Request], Reply], *, host: str = "127.0.0.1", port: int = 0,
                 name: str = "webhook-receiver") -> None:
        self._server = _Server((host, port), _handler(answer))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str = "/") -> str:
        host = self._server.server_address[0]
        return f"http://{host}:{self.port}{path}"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(answer: Callable[[Request], Reply]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length <= MAX_BODY else b""
            if length <= MAX_BODY and len(body) < length:
                return  # the sender died mid-request (a killed notifier): nothing was received
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = answer(Request(self.path, headers, body, length, time.monotonic()))
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except OSError:
                pass  # the sender gave up (its timeout, or it was killed)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("webhook receiver: " + format, *args)

    return Handler
