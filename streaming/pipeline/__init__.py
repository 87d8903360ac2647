"""The Spark pipeline: telemetry in, detection output rows to the sinks.

Its door, for `fleetwatch run`, `demo`, `replay`, the spark-submit driver, the benches and tests:
- `start_job(spark, config, bus, store, publisher, stop)` -> `RunningJob` (`.query`,
  `.recorder`); `RunningJob.run_until(stop, finished)`, then `RunningJob.stop()`;
  `run_job(config, RunOptions)` is all of `fleetwatch run`.
- `replay_file(events, alerts_out, config, store=)` -> `ReplaySummary`.
- `spark_session(config)`; `build_pipeline(raw, book, buckets)` -> rows of `OUTPUT_SCHEMA`;
  `parse_stage(raw, book, buckets)` alone; `bucket_of(shard, buckets)`.

Inside: `parse` (contract check, heartbeat thinning, routing to buckets) -> `state`
(DetectorProcessor, the first pass: the cluster and target shards per bucket, with event-time
timers -> HolderProcessor, the second pass: the address and cluster-id shards per bucket, over
the first pass's hand-offs), wired by `graph`; `run` and `replay` start, run and stop it.

Names are loaded on first use: Spark's Python workers import the graph through this door, and
must not load what only the driver needs (the bus client, the store, the metrics server).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.pipeline.graph import build_pipeline
    from streaming.pipeline.parse import bucket_of, parse_stage
    from streaming.pipeline.replay import ReplaySummary, replay_file
    from streaming.pipeline.run import (
        QUERY_NAME,
        RunningJob,
        RunOptions,
        open_store,
        run_job,
        start_job,
        stop_gracefully,
        stop_on_signals,
    )
    from streaming.pipeline.session import checkpoint_id, checkpoint_path, spark_session
    from streaming.pipeline.state import OUTPUT_SCHEMA

__all__ = [
    "OUTPUT_SCHEMA",
    "QUERY_NAME",
    "ReplaySummary",
    "RunOptions",
    "RunningJob",
    "bucket_of",
    "build_pipeline",
    "checkpoint_id",
    "checkpoint_path",
    "open_store",
    "parse_stage",
    "replay_file",
    "run_job",
    "spark_session",
    "start_job",
    "stop_gracefully",
    "stop_on_signals",
]

_HOME = {
    "build_pipeline": "graph",
    **dict.fromkeys(("bucket_of", "parse_stage"), "parse"),
    **dict.fromkeys(("ReplaySummary", "replay_file"), "replay"),
    **dict.fromkeys(("QUERY_NAME", "RunOptions", "RunningJob", "open_store", "run_job", "start_job",
                     "stop_gracefully", "stop_on_signals"), "run"),
    **dict.fromkeys(("checkpoint_id", "checkpoint_path", "spark_session"), "session"),
    "OUTPUT_SCHEMA": "state",
}

__getattr__ = load_on_first_use(__name__, _HOME)
