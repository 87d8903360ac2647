"""The supervisor's policy without Spark: delays, giving up, what a restart cannot fix, and the
restart count from the store to /metrics (the live cases are in test_supervise.py)."""

from __future__ import annotations

import pytest

from streaming.config import ConfigError, RestartSettings, load_config
from streaming.job.supervise import Backoff, QueryStalled, StallWatch, query_failure_line, restartable
from streaming.metrics import render_metrics
from streaming.store import Store
from streaming.workshop.fake_clock import FakeClock


def test_delays_double_up_to_the_cap_and_start_over_after_a_healthy_run():
    clock = FakeClock(0.0)
    backoff = Backoff(RestartSettings(give_up_after=100), clock)
    delays = []
    for _ in range(8):
        clock.advance(1)
        delays.append(backoff.after_failure(ran_s=1))
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    clock.advance(400)
    assert backoff.after_failure(ran_s=300) == 1


def test_too_many_failures_within_the_window_give_up_and_older_ones_do_not_count():
    clock = FakeClock(0.0)
    backoff = Backoff(RestartSettings(give_up_after=3, give_up_window_ms=60_000), clock)
    assert backoff.after_failure(ran_s=1) is not None
    clock.now = 61
    assert backoff.after_failure(ran_s=1) is not None
    assert backoff.after_failure(ran_s=1) is not None  # the first is out of the window
    assert backoff.after_failure(ran_s=1) is None


def test_state_of_another_shape_is_not_restartable():
    assert not restartable(RuntimeError("[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming ..."))
    assert not restartable(RuntimeError("the checkpoint's detection state has 8 buckets but spark.state_buckets is 4"))
    assert restartable(RuntimeError('Cannot invoke "scala.collection.IterableOps.map(scala.Function1)"'))


class QueryFailure(Exception):
    """What `StreamingQuery.exception()` gives: the message, and the Java cause in `_cause`."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self._cause = cause


def test_a_failure_is_one_line_with_its_java_cause():
    npe = QueryFailure('Cannot invoke "x" because "y" is null\n\nJVM stacktrace:\n...',
                       'java.lang.NullPointerException: Cannot invoke "x" because "y" is null\n\tat a.b(C.scala:520)')
    assert query_failure_line(npe) == 'java.lang.NullPointerException: Cannot invoke "x" because "y" is null'
    crashed = QueryFailure("An exception was raised by the Python Proxy. Return Message: Traceback (most recent call "
                           "last):\n  File ...\npy4j.protocol.Py4JJavaError: An error occurred\n\tat x\n"
                           "Caused by: org.apache.spark.SparkException: Job aborted due to stage failure: "
                           "Python worker exited unexpectedly (crashed)\n\tat y", "py4j.Py4JException: ...")
    assert query_failure_line(crashed) == ("org.apache.spark.SparkException: Job aborted due to stage failure: "
                                   "Python worker exited unexpectedly (crashed)")
    assert query_failure_line(RuntimeError("boom\nmore")) == "boom"


def test_restart_settings_are_validated(tmp_path):
    path = tmp_path / "fleetwatch.yaml"
    path.write_text("spark:\n  restarts:\n    first_delay_ms: 5000\n    max_delay_ms: 1000\n")
    with pytest.raises(ConfigError, match="max_delay_ms"):
        load_config(path)
    path.write_text("spark:\n  restarts:\n    give_up_after_ms: 5\n")
    with pytest.raises(ConfigError, match="give_up_after_ms"):
        load_config(path)


def test_restarts_counted_in_the_store_are_served_as_a_counter(tmp_path):
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store(url).count_restart("fleetwatch", "java.lang.NullPointerException: Cannot invoke", 1_764_000_000_000)
    Store(url).count_restart("fleetwatch", "org.apache.spark.SparkException: Python worker exited", 1_764_000_060_000)
    text = render_metrics(Store(url).engine)
    assert "# TYPE fleetwatch_job_restarts_total counter" in text
    assert 'fleetwatch_job_restarts_total{query="fleetwatch"} 2' in text
    assert 'fleetwatch_job_last_failure_timestamp_seconds{query="fleetwatch"} 1764000060' in text


class QueryAsSparkSaysIt:
    """What `StallWatch` reads of a StreamingQuery: its status and last progress, as Spark gives them
    (the live stall is in test_supervise.py: a Python worker stopped mid-batch)."""

    def __init__(self) -> None:
        self.isActive = True
        self.status = {"message": "Waiting for data to arrive", "isDataAvailable": False, "isTriggerActive": False}
        self.lastProgress: dict | None = None

    def batch(self, batch_id: int | None, *, active: bool) -> None:
        self.status = {**self.status, "isTriggerActive": active}
        self.lastProgress = None if batch_id is None else {"batchId": batch_id}


def test_a_micro_batch_running_past_the_bound_is_a_stall_and_busy_or_idle_queries_are_not():
    clock, query = FakeClock(0.0), QueryAsSparkSaysIt()
    watch = StallWatch(query, stalled_after_s=600, clock=clock)
    for step in range(100):  # busy: a batch every 30 s, each one running, for 50 minutes
        query.batch(step, active=True)
        watch.check()
        clock.advance(30)
    query.batch(100, active=False)  # idle for an hour: no data is no batch
    for _ in range(120):
        watch.check()
        clock.advance(30)
    query.batch(100, active=True)  # then one batch that never ends
    watch.check()
    clock.advance(600)
    watch.check()  # exactly the bound: not yet
    clock.advance(1)
    with pytest.raises(QueryStalled, match="more than 600 s"):
        watch.check()


def test_the_first_batch_of_a_new_query_is_watched_too():
    clock, query = FakeClock(0.0), QueryAsSparkSaysIt()
    watch = StallWatch(query, stalled_after_s=60, clock=clock)
    query.batch(None, active=True)  # no progress yet: the first batch is running
    watch.check()
    clock.advance(61)
    with pytest.raises(QueryStalled):
        watch.check()


def test_stalled_after_ms_is_bounded(tmp_path):
    with pytest.raises(ConfigError, match="stalled_after_ms"):
        config = tmp_path / "f.yaml"
        config.write_text("spark:\n  restarts:\n    stalled_after_ms: 100\n")
        load_config(config)
