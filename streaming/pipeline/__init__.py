"""The Spark pipeline: telemetry in, detection output rows to the sinks.

Its door, for `fleetwatch run`, `demo`, `replay`, the spark-submit driver, the benches and tests:
- `run.start_job(spark, config, bus, store, publisher, stop)` -> `run.RunningJob` (`.query`,
  `.recorder`); `RunningJob.run_until(stop, finished)`, then `RunningJob.stop()`;
  `run.run_job(config, run.RunOptions)` is all of `fleetwatch run`.
- `replay.replay_file(events, alerts_out, config, store=)` -> `replay.ReplaySummary`.
- `session.spark_session(config)`; `graph.build_pipeline(raw, book, buckets)` -> rows of
  `state.OUTPUT_SCHEMA`; `parse.bucket_of(shard, buckets)`.

Inside: `parse` (contract check, heartbeat thinning, routing to buckets) -> `state`
(DetectorProcessor: the detection engines per bucket of shards, with event-time timers), wired
by `graph`. The submodules are imported by name: Spark's workers import only the stages.
"""

__all__ = ["graph", "parse", "replay", "run", "session", "state"]
