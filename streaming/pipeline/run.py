"""The one way a pipeline job starts, runs until it is stopped (or finished), and stops.

- `start_query`: any pipeline query (the live job's, replay's) with its progress recorder -> `RunningJob`.
- `start_job`: the live job over the telemetry topics, `QUERY_NAME` -> `RunningJob`.
- `RunningJob.run_until(stop, finished)`, then `RunningJob.stop()`.
- `run_job(config, RunOptions)`: `fleetwatch run` and the spark-submit driver, start to closing line;
  a failed query is restarted from its checkpoint (`supervise.Supervisor`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from sqlalchemy.engine import make_url

from streaming import topics
from streaming.bus import BusAccess, EmbeddedBus
from streaming.config import FleetwatchConfig
from streaming.console import StatusReader, StatusTicker, duration_text, open_console, plural
from streaming.metrics import start_metrics_server
from streaming.pipeline.graph import build_pipeline
from streaming.pipeline.session import checkpoint_id, checkpoint_path, refuse_one_stage_checkpoint, spark_session
from streaming.pipeline.supervise import Supervisor, first_line
from streaming.progress import ProgressRecorder, QueryStats
from streaming.resilience import Stopping, retry_store
from streaming.sinks import AlertPublisher, BatchWriter
from streaming.source import choose_source, read_telemetry
from streaming.store import Store

__all__ = ["QUERY_NAME", "RunOptions", "RunningJob", "open_store", "reconcile_reset", "run_job", "start_job",
           "start_query", "stop_gracefully", "stop_on_signals"]

log = logging.getLogger(__name__)

QUERY_NAME = "fleetwatch"


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


@dataclass
class RunningJob:
    """A started pipeline query and its progress recorder (`recorder.stats[query.name]`)."""

    spark: SparkSession
    query: StreamingQuery
    recorder: ProgressRecorder

    def run_until(self, stop: threading.Event | None = None, finished: Callable[[QueryStats], bool] | None = None,
                  *, poll_s: float = 1.0, on_poll: Callable[[], Any] | None = None) -> bool:
        """Block until `stop` is set, the query ends (it failed), or `finished` holds for its
        progress; True when it finished. `on_poll` runs every `poll_s` meanwhile."""
        stop = stop if stop is not None else threading.Event()
        while True:
            if finished is not None:
                if self.recorder.wait(self.query.name, finished, timeout_s=poll_s):
                    return True
            elif stop.wait(poll_s):
                return False
            if stop.is_set() or not self.query.isActive:
                return False
            if on_poll is not None:
                on_poll()

    def stop(self, *, graceful: bool = True) -> None:
        """Graceful: the running micro-batch finishes first (`stop_gracefully`). Otherwise at once,
        for a query that has nothing left to do."""
        if graceful:
            stop_gracefully(self.spark, self.query)
        else:
            self.query.stop()


def start_query(spark: SparkSession, config: FleetwatchConfig, raw: DataFrame, writer: Callable[[DataFrame, int], Any],
                *, name: str, checkpoint: str, trigger: str, store: Store | None,
                recorder: ProgressRecorder | None = None) -> RunningJob:
    """Start the pipeline over `raw` (the readers' columns) into `writer` (foreachBatch), as query
    `name`; its progress is recorded (in `store` too, when given). `trigger`: Spark's processingTime.
    `recorder`: the one of an earlier start of the query (already listening), so a restarted query's
    progress adds up with its earlier runs'."""
    if recorder is None:
        recorder = ProgressRecorder(store)
        spark.streams.addListener(recorder)
    query = (build_pipeline(raw, config.rule_book(), config.spark.state_buckets).writeStream.queryName(name)
             .foreachBatch(writer)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=trigger)
             .start())
    return RunningJob(spark, query, recorder)


def start_job(spark: SparkSession, config: FleetwatchConfig, bus: str | BusAccess, store: Store,
              publisher: AlertPublisher | None = None, stop: threading.Event | None = None,
              recorder: ProgressRecorder | None = None) -> RunningJob:
    """Start the live job; its progress recorder also feeds the dashboard's pipeline page.

    Before the query starts: a checkpoint of the job of one detection stage is refused
    (ConfigError), the alerts topic is created when missing, and the open alerts are orphaned
    when the detection state was reset (`reconcile_reset`). `stop`: store writes are
    retried while the store is unavailable, until `stop` is set (without it a store error fails
    the batch). `bus`: a configured bus's access, or the embedded broker's address. `recorder`:
    the earlier start's, when the query is restarted.
    """
    location = checkpoint_path(config, QUERY_NAME)
    refuse_one_stage_checkpoint(spark, location)
    if publisher is not None:
        publisher.ensure_topic()
    orphaned_since = reconcile_reset(store, checkpoint_id(spark, location), stop=stop)
    access = BusAccess.of(bus)
    source = choose_source(spark, config.bus, location, access)
    raw = read_telemetry(spark, access, topics.TELEMETRY, max_records_per_batch=config.spark.max_records_per_batch,
                         source=source,
                         kafka_options={"failOnDataLoss": str(config.bus.fail_on_data_loss).lower()})
    writer = BatchWriter(store, on_alerts=publisher, stop=stop, retention=config.store.retention,
                         checkpoint=(QUERY_NAME, lambda: checkpoint_id(spark, location)),
                         orphaned_since=orphaned_since)
    job = start_query(spark, config, raw, writer, name=QUERY_NAME, checkpoint=location,
                      trigger=f"{config.spark.trigger_ms} milliseconds", store=store, recorder=recorder)
    log.info("job started", extra={"bootstrap": access.bootstrap, "checkpoint": location, "source": source})
    return job


@dataclass(frozen=True)
class RunOptions:
    """How `run_job` shows itself: where the log lines go on a terminal, and /metrics."""

    log_file: Path = Path("var/fleetwatch-run.log")
    verbose: bool = False  # on a terminal, JSON log lines instead of a status line
    metrics_port: int | None = None  # None: no Prometheus /metrics
    metrics_host: str = "127.0.0.1"  # loopback unless told (--metrics-host)


def run_job(config: FleetwatchConfig, options: RunOptions) -> int:
    """`fleetwatch run`: the live job until SIGINT/SIGTERM (the current micro-batch finishes
    first) or a failure that a restart of its query cannot fix (`Supervisor`); the exit code.
    With no bus configured it starts an embedded one; it waits for the store while the database
    is down."""
    stop = threading.Event()
    stop_on_signals(stop)
    log_path = options.log_file
    with open_console(log_path, verbose=options.verbose) as console:
        with ExitStack() as stack:  # stops what started, in reverse order
            bus = None
            if config.bus.bootstrap_servers is None:
                bus = EmbeddedBus(partitions=config.bus.partitions).start()
                stack.callback(bus.stop)
            # A configured bus is reached with its security; the embedded one is plain loopback.
            access = (BusAccess.from_config(config.bus.bootstrap_servers, config.bus.security)
                      if bus is None else BusAccess(bus.bootstrap))
            bootstrap = access.bootstrap
            store = open_store(config.store.url, stop)  # waits (and says so) while the database is down
            if store is None:
                return 0
            stack.callback(store.close)
            metrics = None
            if options.metrics_port is not None:  # Prometheus /metrics
                metrics = start_metrics_server(store, options.metrics_port, options.metrics_host)
                stack.callback(metrics.stop)
            rows = [("bus", bootstrap + (" (embedded Tansu: no bus configured)" if bus is not None else "")),
                    ("store", make_url(config.store.url).render_as_string(hide_password=True)),
                    ("checkpoint", config.spark.checkpoint_dir)]
            if metrics is not None:
                rows.append(("metrics", f"http://{options.metrics_host}:{options.metrics_port}/metrics"))
            rows += [("logs", f"{log_path} (--verbose shows them here)"),
                     ("stop", "Ctrl-C (the current micro-batch finishes first)")]
            console.banner("fleetwatch run: the streaming job", rows)
            supervisor = Supervisor(QUERY_NAME, stop, config.spark.restarts, store)
            ticker = StatusTicker(console, StatusReader(store, None, QUERY_NAME, deliveries_shown=False),
                                  note=supervisor.note).start()
            stack.callback(ticker.stop)
            ticker.phase = "starting Spark"
            spark = spark_session(config)
            stop_on_signals(stop)  # creating the SparkContext took over SIGINT
            stack.callback(spark.stop)
            publisher = AlertPublisher(access, partitions=config.bus.partitions)
            stack.callback(publisher.close)
            ticker.phase = "starting the job"
            try:
                job = start_job(spark, config, access, store, publisher, stop=stop)
            except Stopping:  # asked to stop while the start waited for the store
                return 0
            ticker.reader.recorder = job.recorder
            ticker.phase = None
            try:
                failure = supervisor.run(job, lambda recorder: start_job(spark, config, access, store, publisher,
                                                                         stop=stop, recorder=recorder),
                                         show=lambda phase: _show(ticker, phase))
                ticker.phase = "stopping: finishing the current micro-batch"
            finally:
                supervisor.stop()
            ticker.phase = None
            final = ticker.tick()
            ticker.phase = "stopping"
        if failure is not None:
            console.closing(f"fleetwatch run: the streaming job failed: {first_line(failure)}; details in {log_path}")
            return 1
        console.closing(f"fleetwatch run stopped after {duration_text(final.elapsed_s)}: "
                        f"{plural(final.batches, 'micro-batch', 'micro-batches')}, "
                        f"{plural(final.alerts_seen, 'alert')} in the store ({final.firing} firing)")
        return 0


def _show(ticker: StatusTicker, phase: str | None) -> None:
    ticker.phase = phase
