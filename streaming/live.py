"""`fleetwatch run`: the long-running streaming job over the telemetry topics."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from typing import Any

from kafka import KafkaProducer
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming import topics
from streaming.config import FleetwatchConfig
from streaming.job import build_pipeline, checkpoint_path
from streaming.progress import ProgressRecorder
from streaming.sinks.batch_writer import BatchWriter
from streaming.sinks.store import Store
from streaming.source.telemetry import choose_source, read_telemetry

__all__ = ["QUERY_NAME", "AlertPublisher", "start_job", "stop_gracefully", "stop_on_signals"]

log = logging.getLogger(__name__)

QUERY_NAME = "fleetwatch"


class AlertPublisher:
    """Publishes alert objects to the alerts topic, keyed by alert_id (at least once)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._producer: KafkaProducer | None = None

    def __call__(self, alerts: list[dict[str, Any]]) -> None:
        if self._producer is None:
            self._producer = KafkaProducer(bootstrap_servers=self.bootstrap_servers, acks="all", linger_ms=5)
        for alert in alerts:
            body = {k: v for k, v in alert.items() if k != "sort_key"}
            self._producer.send(topics.ALERTS, key=body["alert_id"].encode(),
                                value=json.dumps(body, separators=(",", ":")).encode())
        self._producer.flush(timeout=30)

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


def start_job(spark: SparkSession, config: FleetwatchConfig, bootstrap_servers: str, store: Store,
              publisher: AlertPublisher | None = None) -> tuple[StreamingQuery, ProgressRecorder]:
    """Start the job; its progress recorder also feeds the dashboard's pipeline page."""
    checkpoint = checkpoint_path(config, QUERY_NAME)
    source = choose_source(spark, config.bus, checkpoint)
    raw = read_telemetry(spark, bootstrap_servers, topics.TELEMETRY,
                         max_records_per_batch=config.spark.max_records_per_batch, source=source,
                         kafka_options={"failOnDataLoss": str(config.bus.fail_on_data_loss).lower()})
    writer = BatchWriter(store, on_alerts=publisher)
    recorder = ProgressRecorder(store)
    spark.streams.addListener(recorder)
    query = (build_pipeline(raw, config.rule_book(), config.spark.state_buckets).writeStream.queryName(QUERY_NAME)
             .foreachBatch(writer)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=f"{config.spark.trigger_ms} milliseconds")
             .start())
    log.info("job started", extra={"bootstrap": bootstrap_servers, "checkpoint": checkpoint, "source": source})
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
