"""A started pipeline query: how it starts over any source into any writer, runs and stops.

- `start_query`: the pipeline graph (`streaming.pipeline.build_pipeline`) over the parse stage's
  rows (`read_parsed_telemetry`, `read_parsed_recording`), into a foreachBatch writer, with its
  progress recorder -> `RunningQuery`.
- `RunningQuery.run_until(stop, finished)`, then `RunningQuery.stop()` (`stop_gracefully`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streaming.config import FleetwatchConfig
from streaming.job.progress import ProgressRecorder, QueryStats
from streaming.job.session import CheckpointLayout
from streaming.pipeline import build_pipeline
from streaming.plumbing.cycles import freeze_long_lived
from streaming.store import Store

__all__ = ["RunningQuery", "start_query", "stop_gracefully"]

log = logging.getLogger(__name__)


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
class RunningQuery:
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


def start_query(spark: SparkSession, config: FleetwatchConfig, telemetry: DataFrame,
                writer: Callable[[DataFrame, int], Any], *, name: str, checkpoint: str, trigger: str,
                store: Store | None, recorder: ProgressRecorder | None = None,
                layout: CheckpointLayout | None = None) -> RunningQuery:
    """Start the pipeline over `telemetry` (as `build_pipeline` takes it) into `writer` (foreachBatch), as query
    `name`; its progress is recorded (in `store` too, when given). `trigger`: Spark's processingTime.
    `recorder`: the one of an earlier start of the query (already listening), so a restarted query's
    progress adds up with its earlier runs'. `layout`: the checkpoint's (`claim_checkpoint`); None for a
    checkpoint of this start alone (a replay's), which runs as a new checkpoint of the live job would."""
    if recorder is None:
        recorder = ProgressRecorder(store)
        spark.streams.addListener(recorder)
    if layout is None:
        layout = CheckpointLayout.new(config.spark.state_buckets, config.spark.shuffle_partitions)
    stream = (build_pipeline(telemetry, config.rule_book(), config.spark.state_buckets,
                             config.spark.max_records_per_batch, layout.time_mode,
                             layout.bucket_keys).writeStream.queryName(name)
              .foreachBatch(writer)
              .option("checkpointLocation", checkpoint)
              .trigger(processingTime=trigger))
    freeze_long_lived()
    query = stream.start()
    return RunningQuery(spark, query, recorder)
