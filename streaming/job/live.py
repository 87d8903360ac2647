"""The live job's query: the telemetry topics in, the store and the alerts topic out.

- `start_live_query`: its startup checks (a checkpoint it cannot continue, the alerts topic, a reset
  detection state), its source (Spark's Kafka connector or the Python reader), its query
  `QUERY_NAME` and its batch writer -> `RunningQuery`. The coordinator calls it, at the start and
  at each restart; the tests and benches that bring their own session call it too.
- `open_store`: the store, waited for while the database is down.
"""

from __future__ import annotations

import logging
import threading

from pyspark.sql import SparkSession

from streaming.bus import BusAccess
from streaming.config import FleetwatchConfig
from streaming.detect import SecondPass
from streaming.job.progress import ProgressRecorder
from streaming.job.query import RunningQuery, start_query
from streaming.job.session import checkpoint_id, checkpoint_path, claim_checkpoint
from streaming.pipeline import read_parsed_telemetry
from streaming.plumbing.resilience import Stopping, retry_store
from streaming.records import topics
from streaming.sinks import AlertPublisher, BatchWriter
from streaming.source import choose_source
from streaming.store import Store

__all__ = ["QUERY_NAME", "open_store", "reconcile_reset", "start_live_query"]

log = logging.getLogger(__name__)

QUERY_NAME = "fleetwatch"


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


def start_live_query(spark: SparkSession, config: FleetwatchConfig, bus: str | BusAccess, store: Store,
                     publisher: AlertPublisher | None = None, stop: threading.Event | None = None,
                     recorder: ProgressRecorder | None = None) -> RunningQuery:
    """Start the live job's query; its progress recorder also feeds the dashboard's pipeline page.

    Before the query starts: a checkpoint of an older layout of the detection state is refused
    (ConfigError) and a new one marked with this job's (`claim_checkpoint`), the alerts topic is
    created when missing, and the open alerts are orphaned when the detection state was reset
    (`reconcile_reset`). `stop`: store writes are
    retried while the store is unavailable, until `stop` is set (without it a store error fails
    the batch). `bus`: a configured bus's access, or the embedded broker's address. `recorder`:
    the earlier start's, when the query is restarted.
    """
    location = checkpoint_path(config, QUERY_NAME)
    layout = claim_checkpoint(spark, location, config.spark.state_buckets, config.spark.shuffle_partitions)
    if publisher is not None:
        publisher.ensure_topic()
    orphaned_since = reconcile_reset(store, checkpoint_id(spark, location), stop=stop)
    access = BusAccess.of(bus)
    source = choose_source(spark, config.bus, location, access)
    telemetry = read_parsed_telemetry(spark, access, topics.TELEMETRY, config.rule_book(), config.spark.state_buckets,
                                      config.spark.max_records_per_batch, source=source,
                                      kafka_options={"failOnDataLoss": str(config.bus.fail_on_data_loss).lower()})
    writer = BatchWriter(store, on_alerts=publisher, stop=stop, retention=config.store.retention,
                         checkpoint=(QUERY_NAME, lambda: checkpoint_id(spark, location)),
                         orphaned_since=orphaned_since, second_pass=SecondPass(config.rule_book()))
    query = start_query(spark, config, telemetry, writer, name=QUERY_NAME, checkpoint=location,
                        trigger=f"{config.spark.trigger_ms} milliseconds", store=store, recorder=recorder,
                        layout=layout)
    log.info("job started", extra={"bootstrap": access.bootstrap, "checkpoint": location, "source": source})
    return query
