"""The demo's own webhook receiver: what a team's alert endpoint does, on 127.0.0.1.

`fleetwatch demo` runs the notifier against it, so the webhook path is seen end to end: each
POST must carry a valid `X-Fleetwatch-Signature` (HMAC-SHA256 with the demo's secret, at most
5 minutes old) whose `v2` covers its `X-Fleetwatch-Delivery-Id`, else it is refused with 401 and
nothing is recorded: a request replayed with another delivery id (a firing passed off as its
resolution) is refused. Each accepted alert is appended to a JSONL file (`received.jsonl` in the
demo's work folder) and answered 200; a fleet incident (`fleetwatch.incident/v1`) is recorded as the
member alerts it tells, each beside its `incident_id`. A notification sent twice (the notifier delivers at least
once) is recorded twice, marked `duplicate`, as a receiver that drops duplicates by what the
verified body says (alert_id and status) would see it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http import HTTPStatus
from pathlib import Path
from typing import Any

from streaming.notify import INCIDENT_SCHEMA, verify_signature
from streaming.plumbing.clock import now_ms
from streaming.plumbing.receiver import MAX_BODY, Reply, Request, WebhookReceiver

__all__ = ["DemoReceiver"]

log = logging.getLogger(__name__)


class DemoReceiver:
    """Start with `start()` (or as a context manager); `url` is where the notifier posts."""

    def __init__(self, record_path: Path, secret: str, host: str = "127.0.0.1", port: int = 0) -> None:
        self.record_path = record_path
        self._secret = secret
        self._lock = threading.Lock()
        self._seen: set[tuple[str, str]] = set()
        self.accepted = 0
        self.refused = 0
        self._receiver = WebhookReceiver(self._answer, host=host, port=port, name="demo-receiver")

    @property
    def url(self) -> str:
        return self._receiver.url("/alerts")

    def start(self) -> DemoReceiver:
        self._receiver.start()
        log.info("demo webhook receiver listening", extra={"url": self.url, "records": str(self.record_path)})
        return self

    def stop(self) -> None:
        self._receiver.stop()

    def __enter__(self) -> DemoReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, request: Request) -> Reply:
        status = (self._accept(request.body, request.headers.get("x-fleetwatch-signature"),
                               request.headers.get("x-fleetwatch-delivery-id"))
                  if 0 < request.length <= MAX_BODY else HTTPStatus.BAD_REQUEST)
        return Reply(status, json.dumps({"ok": status == HTTPStatus.OK}).encode(),
                     {"Content-Type": "application/json"})

    def _accept(self, body: bytes, signature: str | None, delivery_id: str | None) -> HTTPStatus:
        if signature is None or delivery_id is None or not verify_signature(
                self._secret, body, signature, now=time.time(), delivery_id=delivery_id):
            with self._lock:
                self.refused += 1
            log.warning("demo receiver refused a request: missing or invalid signature of its body and delivery id")
            return HTTPStatus.UNAUTHORIZED
        try:
            obj: dict[str, Any] = json.loads(body)
            incident = obj.get("incident_id") if obj.get("schema") == INCIDENT_SCHEMA else None
            alerts: list[dict[str, Any]] = obj["alerts"] if incident is not None else [obj]
            # Deduplicated on the verified body only.
            keys = [(str(alert["alert_id"]), str(alert["status"])) for alert in alerts]
        except (ValueError, KeyError, TypeError, AttributeError):
            return HTTPStatus.BAD_REQUEST
        with self._lock, self.record_path.open("a", encoding="utf-8") as out:
            self.accepted += 1
            for key, alert in zip(keys, alerts, strict=True):
                duplicate = key in self._seen
                self._seen.add(key)
                record = {"received_at": now_ms(), "signature": "verified", "duplicate": duplicate, "alert": alert}
                out.write(json.dumps(record if incident is None else {**record, "incident_id": incident}) + "\n")
                log.info("demo receiver got an alert", extra={"alert_id": key[0], "status": key[1],
                                                              "rule": alert.get("rule"), "duplicate": duplicate,
                                                              "incident_id": incident})
        return HTTPStatus.OK
