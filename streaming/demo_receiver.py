"""The demo's own webhook receiver: what a team's alert endpoint does, on 127.0.0.1.

`fleetwatch demo` runs the notifier against it, so the webhook path is seen end to end: each
POST must carry a valid `X-Fleetwatch-Signature` (HMAC-SHA256 with the demo's secret, at most
5 minutes old), else it is refused with 401 and nothing is recorded; each accepted alert is
appended to a JSONL file (`received.jsonl` in the demo's work folder) and answered 200. A
notification sent twice (the notifier delivers at least once) is recorded twice, marked
`duplicate`, as a receiver that drops duplicates by alert_id and status would see it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from streaming.clock import now_ms
from streaming.notify import verify_signature

__all__ = ["DemoReceiver"]

log = logging.getLogger(__name__)

_MAX_BODY = 1 << 20


class DemoReceiver:
    """Start with `start()` (or as a context manager); `url` is where the notifier posts."""

    def __init__(self, record_path: Path, secret: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.record_path = record_path
        self._secret = secret
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()
        self.accepted = 0
        self.refused = 0
        self._server = ThreadingHTTPServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="demo-receiver", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/alerts"

    def start(self) -> DemoReceiver:
        self._thread.start()
        log.info("demo webhook receiver listening", extra={"url": self.url, "records": str(self.record_path)})
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> DemoReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self, body: bytes, signature: str | None) -> HTTPStatus:
        if signature is None or not verify_signature(self._secret, body, signature, now=time.time()):
            with self._lock:
                self.refused += 1
            log.warning("demo receiver refused a request: missing or invalid signature")
            return HTTPStatus.UNAUTHORIZED
        try:
            alert: dict[str, Any] = json.loads(body)
            key = (str(alert["alert_id"]), str(alert["status"]))
        except (ValueError, KeyError, TypeError):
            return HTTPStatus.BAD_REQUEST
        with self._lock:
            duplicate = key in self._seen
            self._seen.add(key)
            self.accepted += 1
            with self.record_path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"received_at": now_ms(), "signature": "verified",
                                      "duplicate": duplicate, "alert": alert}) + "\n")
        log.info("demo receiver got an alert", extra={"alert_id": key[0], "status": key[1],
                                                      "rule": alert.get("rule"), "duplicate": duplicate})
        return HTTPStatus.OK

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= _MAX_BODY:
                    self._answer(HTTPStatus.BAD_REQUEST)
                    return
                body = self.rfile.read(length)
                self._answer(receiver._accept(body, self.headers.get("X-Fleetwatch-Signature")))

            def _answer(self, status: HTTPStatus) -> None:
                payload = json.dumps({"ok": status == HTTPStatus.OK}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("demo receiver: " + format, *args)

        return Handler
