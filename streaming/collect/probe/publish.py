"""Where a round's events go: a JSONL file, or the telemetry topics of a Kafka bus."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import IO, Any

from streaming import topics

__all__ = ["BusPublisher", "JsonlWriter"]

log = logging.getLogger(__name__)

_TOPIC_OF = {"metadata_response": topics.METADATA, "broker_heartbeat": topics.HEARTBEATS,
             "broker_state": topics.BROKER_STATES}


class JsonlWriter:
    """Events to a JSONL file, one per line, flushed after every batch."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("w", encoding="utf-8")
        self.written = 0

    def __call__(self, events: list[dict[str, Any]]) -> None:
        self._fh.writelines(json.dumps(ev, separators=(",", ":")) + "\n" for ev in events)
        self._fh.flush()
        self.written += len(events)

    def close(self) -> None:
        self._fh.close()


class BusPublisher:
    """Events to the telemetry topics of a Kafka bus, keyed by cluster id."""

    def __init__(self, bootstrap_servers: str, partitions: int = 1) -> None:
        from kafka import KafkaProducer

        from streaming.bus import ensure_topics

        ensure_topics(bootstrap_servers, (topics.METADATA, topics.HEARTBEATS, topics.BROKER_STATES), partitions)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap_servers, client_id="fleetwatch-probe",
                                       acks=1, linger_ms=20)
        self.sent = 0
        self.failures = 0

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        log.warning("publishing an event failed", extra={"error": str(exc)})

    def __call__(self, events: list[dict[str, Any]]) -> None:
        for ev in events:
            value = json.dumps(ev, separators=(",", ":")).encode()
            future = self._producer.send(_TOPIC_OF[ev["type"]], key=(ev["cluster_id"] or "").encode(), value=value)
            future.add_errback(self._failed)
            self.sent += 1

    def close(self) -> None:
        self._producer.flush()
        self._producer.close()
