"""The driver side: who starts the pipeline, runs it and stops it (the graph that runs on Spark's
workers is streaming.pipeline's).

Its door, for `fleetwatch run`, `demo`, `replay`, the spark-submit driver, check-config, the
benches and tests:
- `JobCoordinator(config, plan, observer, stop).run()` -> `Outcome`: the one start sequence of
  every job (bus, store, /metrics, companions, Spark, the alerts topic, the query, supervision,
  stop in reverse order), for a `LivePlan` or a `ReplayPlan` (its file: `Recording.of(path)`);
  the observer (`JobObserver`; the console's `JobView`) is told what opened (`Wiring`), each
  phase, and when the query runs; `Companions` are the parts a live job runs beside its query
  (the demo's). `stop_on_signals(stop)`.
- `run_job(config, RunOptions)`: all of `fleetwatch run` and the spark-submit driver.
- `replay_file(events, alerts_out, config, store=)` -> `ReplaySummary`.
- `start_live_query(spark, config, bus, store, publisher, stop)` -> `RunningQuery` (`.query`,
  `.recorder`; `run_until(stop, finished)`, then `stop()`): the live job's query in a session of
  one's own; `stop_gracefully`, `open_store`, `QUERY_NAME`.
- `spark_session(config)`, `context_settings(config)`; `checkpoint_path`, `checkpoint_id`;
  `CheckpointLayout` (`.new(buckets, partitions)`: what a new checkpoint's stateful operator runs with).
- `ProgressRecorder`: each micro-batch's progress, into the store and for the runners.
- `Console`, `open_console`, `JobView`: what `run` and `demo` show a person at a terminal.

Inside, bottom first: `prepared` (what `make` prepares for a fast start), `spark_daemon` (Spark's
Python worker daemon, `spark.python.daemon.module`), `session`, `progress`, `query` (a started
query), `console`, `live` and `recorded` (the live job's and the replay's query: startup checks,
source, writer), `plans` (what a job is made of), `supervise`, `coordinator`, then the programs
on it: `run`, `replay`, `startup` (`python -m streaming.job.startup`, run by `make`). No module
imports one above it.

Names are loaded on first use: `fleetwatch run` checks its config before Spark's modules load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streaming.plumbing.lazy_names import load_on_first_use

if TYPE_CHECKING:
    from streaming.job.console import Console, JobView, duration_text, open_console, plural
    from streaming.job.coordinator import JobCoordinator, JobObserver, Outcome, stop_on_signals
    from streaming.job.live import QUERY_NAME, open_store, start_live_query
    from streaming.job.plans import Companions, LivePlan, ReplayPlan, Wiring
    from streaming.job.progress import ProgressRecorder
    from streaming.job.query import RunningQuery, stop_gracefully
    from streaming.job.recorded import Recording
    from streaming.job.replay import ReplaySummary, replay_file
    from streaming.job.run import RunOptions, run_job
    from streaming.job.session import CheckpointLayout, checkpoint_id, checkpoint_path, context_settings, spark_session
    from streaming.job.supervise import query_failure_line

__all__ = [
    "QUERY_NAME",
    "CheckpointLayout",
    "Companions",
    "Console",
    "JobCoordinator",
    "JobObserver",
    "JobView",
    "LivePlan",
    "Outcome",
    "ProgressRecorder",
    "Recording",
    "ReplayPlan",
    "ReplaySummary",
    "RunOptions",
    "RunningQuery",
    "Wiring",
    "checkpoint_id",
    "checkpoint_path",
    "context_settings",
    "duration_text",
    "open_console",
    "open_store",
    "plural",
    "query_failure_line",
    "replay_file",
    "run_job",
    "spark_session",
    "start_live_query",
    "stop_gracefully",
    "stop_on_signals",
]

_HOME = {
    **dict.fromkeys(("Console", "JobView", "duration_text", "open_console", "plural"), "console"),
    "ProgressRecorder": "progress",
    **dict.fromkeys(("JobCoordinator", "JobObserver", "Outcome", "stop_on_signals"), "coordinator"),
    **dict.fromkeys(("QUERY_NAME", "open_store", "start_live_query"), "live"),
    **dict.fromkeys(("Companions", "LivePlan", "ReplayPlan", "Wiring"), "plans"),
    **dict.fromkeys(("RunningQuery", "stop_gracefully"), "query"),
    "Recording": "recorded",
    **dict.fromkeys(("ReplaySummary", "replay_file"), "replay"),
    **dict.fromkeys(("RunOptions", "run_job"), "run"),
    **dict.fromkeys(("CheckpointLayout", "checkpoint_id", "checkpoint_path", "context_settings", "spark_session"),
                    "session"),
    "query_failure_line": "supervise",
}

__getattr__ = load_on_first_use(__name__, _HOME)
