"""`fleetwatch run`: the long-running streaming job over the telemetry topics."""

from __future__ import annotations

import logging
import signal
import threading
import time

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming import topics
from streaming.bus import BusAccess, BusError, ensure_topics
from streaming.config import FleetwatchConfig
from streaming.job import build_pipeline, checkpoint_id, checkpoint_path
from streaming.progress import ProgressRecorder
from streaming.resilience import Stopping, one_line, retry_store
from streaming.sinks.batch_writer import BatchWriter, KeyedAlert
from streaming.source.telemetry import choose_source, read_telemetry
from streaming.store import Store

__all__ = ["QUERY_NAME", "AlertPublisher", "PublishFailed", "open_store", "reconcile_reset",
           "start_job", "stop_gracefully", "stop_on_signals"]

log = logging.getLogger(__name__)

QUERY_NAME = "fleetwatch"
# How long one batch's publishing may wait for the bus: it delays the stream, never fails it.
_PUBLISH_TIMEOUT_S = 10.0
_TOPIC_RETRY_S = 60.0


class PublishFailed(Exception):
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
                        extra={"topic": topics.ALERTS, "error": one_line(exc)})
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
                errors.append(one_line(exc))
                break
            except KafkaError as exc:  # this alert only (e.g. MessageSizeTooLargeError)
                failed += 1
                errors.append(one_line(exc))
        try:
            self._producer.flush(timeout=self.timeout_s)
        except KafkaError as exc:
            errors.append(one_line(exc))
        for future in futures:
            if not future.is_done or future.failed():
                failed += 1
                if future.is_done:
                    errors.append(one_line(future.exception))
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


def stop_on_signals(stop: threading.Event) -> None:
    """Makes SIGINT and SIGTERM set `stop`, so the caller can stop the query gracefully.

    Call it again once the SparkSession exists: creating the SparkContext replaces the SIGINT
    handler with one that cancels the running jobs, and Ctrl-C would then kill the batch.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


def open_store(url: str, stop: threading.Event | None = None) -> Store | None:
    """The store, once it can be reached: while the database is down, wait and retry with backoff
    (one log line per retry). None when `stop` was set meanwhile."""
    try:
        return retry_store(lambda: Store(url), what="open the store", stop=stop)
    except Stopping:
        return None


def reconcile_reset(store: Store, current_checkpoint: str | None, *,
                    stop: threading.Event | None = None) -> int | None:
    """Orphan the open alerts when the detection state was reset; returns since when open alerts
    are orphaned (now, or left from an earlier start), None when none are.

    The state is reset when the job starts on an empty checkpoint (`current_checkpoint` None), or
    on another one than the store last recorded. A store that never recorded a checkpoint (written
    by an older version) is taken as this checkpoint's. The writer resolves the orphans the new
    state does not fire again (streaming/detect/README.md, "Checkpoint reset").
    """
    previous = retry_store(lambda: store.checkpoint_of(QUERY_NAME), what="read the checkpoint id", stop=stop)
    if current_checkpoint is None or previous not in (None, current_checkpoint):
        orphaned = retry_store(store.orphan_open_alerts, what="orphan the open alerts", stop=stop)
        if orphaned:
            log.warning("detection state reset: open alerts orphaned until the new state has caught up",
                        extra={"orphaned": orphaned, "previous_checkpoint": previous,
                               "checkpoint": current_checkpoint})
    return retry_store(store.orphaned_since, what="read orphaned alerts", stop=stop)


def start_job(spark: SparkSession, config: FleetwatchConfig, bus: str | BusAccess, store: Store,
              publisher: AlertPublisher | None = None,
              stop: threading.Event | None = None) -> tuple[StreamingQuery, ProgressRecorder]:
    """Start the job; its progress recorder also feeds the dashboard's pipeline page.

    Before the query starts: the alerts topic is created when missing, and the open alerts are
    orphaned when the detection state was reset (`reconcile_reset`). `stop`: store writes are
    retried while the store is unavailable, until `stop` is set (without it a store error fails
    the batch). `bus`: a configured bus's access, or the embedded broker's address.
    """
    location = checkpoint_path(config, QUERY_NAME)
    if publisher is not None:
        publisher.ensure_topic()
    orphaned_since = reconcile_reset(store, checkpoint_id(spark, location), stop=stop)
    access = BusAccess.of(bus)
    source = choose_source(spark, config.bus, location)
    raw = read_telemetry(spark, access, topics.TELEMETRY, max_records_per_batch=config.spark.max_records_per_batch,
                         source=source,
                         kafka_options={"failOnDataLoss": str(config.bus.fail_on_data_loss).lower()})
    writer = BatchWriter(store, on_alerts=publisher, stop=stop, retention=config.store.retention,
                         checkpoint=(QUERY_NAME, lambda: checkpoint_id(spark, location)),
                         orphaned_since=orphaned_since)
    recorder = ProgressRecorder(store)
    spark.streams.addListener(recorder)
    query = (build_pipeline(raw, config.rule_book(), config.spark.state_buckets).writeStream.queryName(QUERY_NAME)
             .foreachBatch(writer)
             .option("checkpointLocation", location)
             .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds")
             .start())
    log.info("job started", extra={"bootstrap": access.bootstrap, "checkpoint": location, "source": source})
    return query, recorder


def stop_gracefully(spark: SparkSession, query: StreamingQuery, timeout_s: float = 20.0) -> None:
    """Let the running micro-batch finish (its output is then committed), then stop.

    A batch still running at the deadline is cancelled: nothing of it is committed, so the
    next start runs it again (every sink write is idempotent).
    """
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)  # polling the query status, bounded by the deadline
    # A cancelled batch is expected here, not an error worth a stack trace in the user's terminal.
    spark.sparkContext.setLogLevel("OFF")
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    query.stop()
    log.info("job stopped", extra={"query": query.name})
