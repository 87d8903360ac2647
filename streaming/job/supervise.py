"""Keeping the live job's streaming query running (`fleetwatch run`, `demo`, the spark-submit driver).

A query that fails is started again from its checkpoint, in the same Spark session, after a delay
that doubles from `spark.restarts.first_delay_ms` up to `max_delay_ms`, and starts over once the
query ran `healthy_after_ms` without failing. A restart is cheap and usually all a failure needs:
the batch that failed is not committed, so it runs again (every sink write is idempotent), and a
batch whose commit was written before it threw (SPARK-55271's NullPointerException after a kill)
is simply not run again.

A query can also hang without failing: a micro-batch waiting forever on a Python worker that
stopped answering, or the query's execution thread dead of a JVM Error Spark does not catch
(StackOverflowError, seen on a standalone cluster: the query stayed "active" with no batch at all).
`StallWatch` tells it from a query with nothing to do (no data is no batch) and the supervisor
treats it as a failure: the query is stopped, within a bound, and restarted.

What a restart cannot fix ends the run, for the process's own supervisor (Kubernetes, systemd)
and a human: a checkpoint Spark cannot continue (`NOT_RESTARTABLE`), a `ConfigError` from a
restart's checks (e.g. a source switch), and `give_up_after` failures within `give_up_window_ms`.
A stop (SIGINT, SIGTERM) during a delay ends the run at once, without a restart; so does a stuck
query that does not stop within `STOP_STUCK_S` (the process's supervisor starts a new driver).

Each failure is one log line (its first line, the restart count, the delay) and counts in the
store (`Store.count_restart`), where /metrics reads it (`fleetwatch_job_restarts_total`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import SQLAlchemyError

from streaming.config import ConfigError, RestartSettings
from streaming.plumbing.clock import now_ms
from streaming.plumbing.errors import FleetwatchError, first_line
from streaming.plumbing.resilience import Stopping
from streaming.store import Store

if TYPE_CHECKING:
    from streaming.job.progress import ProgressRecorder
    from streaming.job.query import RunningQuery

__all__ = ["NOT_RESTARTABLE", "Backoff", "QueryStalled", "StallWatch", "Supervisor", "query_failure_line",
           "restartable"]

log = logging.getLogger(__name__)

RESTARTING = "streaming query failed: restarting it from its checkpoint"

# Failures that fail the same way after any number of restarts: Spark's error conditions for state
# of another shape than the query's, and the detectors' own check of the bucket count.
NOT_RESTARTABLE = (
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_COLUMN_FAMILY_SCHEMA_INCOMPATIBLE",
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART",
    "STATE_STORE_INVALID_VALUE_SCHEMA_EVOLUTION",
    "STATE_STORE_INVALID_VARIABLE_TYPE_CHANGE",
    "STATE_STORE_VALUE_SCHEMA_EVOLUTION_THRESHOLD_EXCEEDED",
    "STDS_MIXED_CHECKPOINT_FORMAT_VERSIONS_NOT_SUPPORTED",
    "buckets but spark.state_buckets is",  # streaming/pipeline/bucket_keys.py: bucket_count_changed
    # bus.fail_on_data_loss asked the query to stop when the bus deleted what it had not read: a
    # restart would start at the same lost offsets.
    "KAFKA_DATA_LOSS",
)


# How long a stuck query is given to stop before the run ends instead (a task blocked in the JVM
# may never notice its cancellation).
STOP_STUCK_S = 120.0


class QueryStalled(FleetwatchError):
    """The query is active but stuck (`StallWatch`): a failure to restart from, like a thrown one."""


class StallWatch:
    """Tells a stuck query from a busy or an idle one, from what Spark says of it each poll.

    Stuck: one micro-batch (the same `lastProgress` batch behind an active trigger) has run longer
    than `stalled_after_s`, or the query's execution thread is no longer alive while Spark still
    calls the query active. An idle query (no trigger active) and a busy one (batch after batch)
    are not stuck, however long."""

    def __init__(self, query: Any, stalled_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._query = query
        self._limit_s = stalled_after_s
        self._clock = clock
        self._batch: Any = None
        self._active_since: float | None = None

    def check(self) -> None:
        """Raise QueryStalled when the query is stuck."""
        if not self._thread_alive():
            raise QueryStalled("streaming query stalled: its execution thread died without failing it")
        status, progress = self._query.status, self._query.lastProgress
        batch = progress.get("batchId") if progress else None
        now = self._clock()
        if not status.get("isTriggerActive"):
            self._active_since = None
        elif self._active_since is None or batch != self._batch:
            self._active_since, self._batch = now, batch
        elif now - self._active_since > self._limit_s:
            raise QueryStalled(f"streaming query stalled: a micro-batch has run for more than "
                               f"{self._limit_s:g} s (spark.restarts.stalled_after_ms)")

    def _thread_alive(self) -> bool:
        """Whether the query's execution thread lives (Spark's own object; True when it cannot tell)."""
        try:
            execution = self._query._jsq.streamingQuery()
            return bool(execution.queryExecutionThread().isAlive()) or not self._query.isActive
        except Exception:  # another Spark's internals (Connect, a later version): no answer is no alarm
            return True


# A failure in the batch writer (foreachBatch) begins so, then the writer's Python traceback.
_PYTHON_PROXY = "An exception was raised by the Python Proxy"


def query_failure_line(failure: BaseException) -> str:
    """A failure in one line: the first of its message (Spark's span pages of stack trace), with
    the class of its Java cause when the message is the cause's ("java.lang.NullPointerException:
    Cannot invoke ..." rather than "Cannot invoke ..."). A failure in the batch writer is its first
    Java cause instead ("Job aborted due to stage failure: ... Python worker exited unexpectedly")."""
    cause = getattr(failure, "_cause", None)  # PySpark keeps the Java cause of a query's failure there only
    lines = str(failure).strip().splitlines()
    text = first_line(failure)
    if _PYTHON_PROXY in text:
        below = lines + (str(cause).splitlines() if cause is not None else [])
        return next((line.removeprefix("Caused by: ")[:300] for line in below if line.startswith("Caused by: ")),
                    text)
    cause_line = first_line(cause) if cause is not None else ""
    return cause_line if text and text in cause_line else text


def restartable(failure: BaseException) -> bool:
    text = str(failure)
    return not any(marker in text for marker in NOT_RESTARTABLE)


class Backoff:
    """The delays between restarts, and when to give up (`RestartSettings`)."""

    def __init__(self, settings: RestartSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._failures: deque[float] = deque()  # within the window, oldest first
        self._in_a_row = 0

    def after_failure(self, ran_s: float) -> float | None:
        """The delay before the next start, in seconds, for a query that failed after running
        `ran_s`; None when that makes `give_up_after` failures within the window."""
        now = self._clock()
        self._failures.append(now)
        while now - self._failures[0] > self.settings.give_up_window_ms / 1000:
            self._failures.popleft()
        if len(self._failures) >= self.settings.give_up_after:
            return None
        if ran_s * 1000 >= self.settings.healthy_after_ms:
            self._in_a_row = 0
        self._in_a_row += 1
        delay_ms = min(self.settings.first_delay_ms * 2 ** min(self._in_a_row - 1, 32), self.settings.max_delay_ms)
        return delay_ms / 1000


class Supervisor:
    """Runs the live job's query (named `query`) until a stop, restarting it when it fails (module
    docstring). `note()` is the status line's lasting note."""

    def __init__(self, query: str, stop: threading.Event, settings: RestartSettings, store: Store) -> None:
        self.query = query
        self._stop = stop
        self._backoff = Backoff(settings)
        self._store = store
        self.running: RunningQuery | None = None  # None once stopped, and until a failed query restarts
        self.restarts = 0
        self.last_error: str | None = None

    def note(self) -> str | None:
        if not self.restarts:
            return None
        times = "once" if self.restarts == 1 else f"{self.restarts} times"
        return f"query restarted {times} (last: {(self.last_error or '')[:80]})"

    def run(self, query: RunningQuery, restart: Callable[[ProgressRecorder], RunningQuery],
            show: Callable[[str | None], Any] = lambda _: None,
            on_poll: Callable[[], Any] = lambda: None) -> BaseException | None:
        """Run the started `query` until a stop (None) or a failure that ends the run (returned); `stop()`
        afterwards. `restart(recorder)` starts the query again, with the first start's progress
        recorder (a ConfigError it raises ends the run); `show` tells the status line what is
        going on (None: the query runs); `on_poll` runs every second while the query runs."""
        self.running = query
        recorder = query.recorder
        while True:
            started = time.monotonic()
            try:
                failure = self._watch(lambda: restart(recorder), show, on_poll)
            except Stopping:  # asked to stop while a restart waited for the store
                return None
            if failure is None:
                return None
            delay_s = self._delay_after(failure, time.monotonic() - started)
            if delay_s is None:
                return failure
            if not self._stop_within(STOP_STUCK_S):  # it failed: nothing left to finish
                # Whatever holds the query would hold the session's stop as well: a driver hanging
                # on its way out is a monitor down that nobody restarts. Exit now, for the process's
                # supervisor (systemd, Kubernetes) to start a new one on the checkpoint.
                log.error("stuck streaming query did not stop: exiting for a new driver",
                          extra={"error": query_failure_line(failure), "waited_s": STOP_STUCK_S})
                logging.shutdown()
                os._exit(1)
            show(f"query failed: restarting it in {delay_s:g} s")
            if self._stop.wait(delay_s):
                return None
            show("restarting the query")

    def stop(self, *, graceful: bool = True) -> None:
        if self.running is not None:
            self.running.stop(graceful=graceful)
            self.running = None

    def _stop_within(self, timeout_s: float) -> bool:
        """Stop the failed or stuck query at once; False when it did not stop within `timeout_s`."""
        stopper = threading.Thread(target=self.stop, kwargs={"graceful": False}, name="stop-query", daemon=True)
        stopper.start()
        stopper.join(timeout_s)
        return not stopper.is_alive()

    def _watch(self, start: Callable[[], RunningQuery], show: Callable[[str | None], Any],
               on_poll: Callable[[], Any]) -> BaseException | None:
        """Start the query if it is not running, and run it until a stop (None) or its failure."""
        if self.running is None:
            try:
                self.running = start()
            except (ConfigError, Stopping):
                raise
            except Exception as exc:  # e.g. the bus unreachable for the alerts topic: as a failed query
                return exc
            show(None)
        watch = StallWatch(self.running.query, self._backoff.settings.stalled_after_ms / 1000)

        def poll() -> None:
            watch.check()
            on_poll()

        try:
            self.running.run_until(self._stop, on_poll=poll)
        except QueryStalled as stalled:
            return stalled
        if self._stop.is_set():  # a batch that gave up waiting for the store on a stop is no failure
            return None
        return self.running.query.exception()  # None: stopped by someone else, as a stop

    def _delay_after(self, failure: BaseException, ran_s: float) -> float | None:
        """Log the failure once, count it when it is restarted; the delay before the restart, or
        None when the run ends."""
        error = query_failure_line(failure)
        if not restartable(failure):
            return None  # the run ends with this error as its closing line
        delay_s = self._backoff.after_failure(ran_s)
        if delay_s is None:
            settings = self._backoff.settings
            log.error("streaming query failed too often: giving up",
                      extra={"error": error, "failures": settings.give_up_after,
                             "window_s": settings.give_up_window_ms / 1000})
            return None
        self.restarts += 1
        self.last_error = error
        log.warning(RESTARTING, extra={"error": error, "restarts": self.restarts, "delay_s": delay_s})
        try:
            self._store.count_restart(self.query, error, now_ms())
        except SQLAlchemyError as exc:  # counting is best effort: the restart matters more
            log.warning("query restart not counted: store unavailable", extra={"error": first_line(exc, named=True)})
        return delay_s
