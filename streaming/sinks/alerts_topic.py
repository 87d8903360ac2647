"""The alerts topic: every alert a batch emits, published to the bus for other consumers (best effort)."""

from __future__ import annotations

import logging
import time

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from streaming.bus import BusAccess, BusError, ensure_topics
from streaming.plumbing.errors import FleetwatchError, first_line
from streaming.records import topics
from streaming.sinks.batch_writer import KeyedAlert

__all__ = ["AlertPublisher", "PublishFailed"]

log = logging.getLogger(__name__)

# How long one batch's publishing may wait for the bus: it delays the stream, never fails it.
_PUBLISH_TIMEOUT_S = 10.0
_TOPIC_RETRY_S = 60.0


class PublishFailed(FleetwatchError):
    """Some alerts of a batch were not published; `failed` says how many."""

    def __init__(self, failed: int, total: int, error: str) -> None:
        super().__init__(f"{failed} of {total} alerts not published: {error}")
        self.failed = failed


class AlertPublisher:
    """Publishes alert objects to the alerts topic, keyed by alert_id (at least once), best effort.

    The topic is created when missing (`ensure_topic`, at start and again at most once a minute
    after a failure), so a bus without automatic topic creation works. Every send is checked; a
    batch with failures raises `PublishFailed` (the caller logs and counts it). An alert the bus
    refuses (over its size limit) fails alone.
    """

    def __init__(self, bus: str | BusAccess, *, partitions: int = 1, timeout_s: float = _PUBLISH_TIMEOUT_S) -> None:
        self.bus = BusAccess.of(bus)
        self.partitions = partitions
        self.timeout_s = timeout_s
        self.published = 0
        self.failed = 0
        self._producer: KafkaProducer | None = None
        self._topic_tried_at = float("-inf")

    def ensure_topic(self) -> bool:
        """Create the alerts topic unless it exists; False (logged) when the bus cannot be asked."""
        self._topic_tried_at = time.monotonic()
        try:
            ensure_topics(self.bus, [topics.ALERTS], self.partitions, timeout_s=self.timeout_s)
        except BusError as exc:
            log.warning("alerts topic not ensured; publishing stays best effort",
                        extra={"topic": topics.ALERTS, "error": first_line(exc, named=True)})
            return False
        return True

    def __call__(self, alerts: list[KeyedAlert]) -> None:
        if self._producer is None:
            # max_block_ms: a send waits this long for the topic's metadata (default 60 s per send).
            self._producer = KafkaProducer(bootstrap_servers=self.bus.bootstrap, acks="all", linger_ms=5,
                                           max_block_ms=int(self.timeout_s * 1000), reconnect_backoff_max_ms=1000,
                                           **self.bus.client_settings)
        futures, failed, errors = [], 0, []
        for i, (_, alert) in enumerate(alerts):
            try:
                futures.append(self._producer.send(topics.ALERTS, key=alert.alert_id.encode(),
                                                   value=alert.message().encode()))
            except KafkaTimeoutError as exc:  # no metadata for the topic: the rest would wait as long
                failed += len(alerts) - i
                errors.append(first_line(exc, named=True))
                break
            except KafkaError as exc:  # this alert only (e.g. MessageSizeTooLargeError)
                failed += 1
                errors.append(first_line(exc, named=True))
        try:
            self._producer.flush(timeout=self.timeout_s)
        except KafkaError as exc:
            errors.append(first_line(exc, named=True))
        for future in futures:
            if not future.is_done or future.failed():
                failed += 1
                if future.is_done:
                    errors.append(first_line(future.exception, named=True))
        self.published += len(alerts) - failed
        self.failed += failed
        if failed:
            # A fresh producer next time: after a bus restart the old one's producer id is unknown
            # to the bus, and every later send of it would fail.
            self._producer.close(timeout=0)
            self._producer = None
            if time.monotonic() - self._topic_tried_at >= _TOPIC_RETRY_S:
                self.ensure_topic()
            raise PublishFailed(failed, len(alerts), errors[0] if errors else "not acknowledged in time")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout=5)
