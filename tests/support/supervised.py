"""A live job run in a test as `fleetwatch run` runs it: under the Supervisor, which starts the
query again when it fails.

The suite starts many queries on a loaded machine (three lanes on 2 cores, load 8 to 12). Each
start launches three fresh Python interpreters that must connect back to Spark within its
hard-coded 10 s (`PythonWorkerFactory.createSimpleWorker`: the Python source's runner and the two
stateful operators' schema workers). At that load one sometimes does not, and the query fails with
"Python worker failed to connect back" (CI, stop 37 run 8). In the field the Supervisor restarts it
(tests/job/test_supervise.py). A test about something else runs its job the same way, and
still fails on any other failure: `unexpected()` names every failure but that one.
"""

from __future__ import annotations

import threading
from types import TracebackType

from pyspark.sql import SparkSession

from streaming.config import FleetwatchConfig
from streaming.job import QUERY_NAME, RunningQuery, start_live_query
from streaming.job.progress import ProgressRecorder
from streaming.job.supervise import Supervisor
from streaming.store import Store

__all__ = ["CONNECT_BACK", "SupervisedJob"]

# Spark's words when a fresh Python interpreter missed its 10 s to connect back.
CONNECT_BACK = "Python worker failed to connect back"


class SupervisedJob:
    """`with SupervisedJob(spark, config, bus, store) as job:` the live job, supervised in a thread
    until the block ends (then stopped as the coordinator stops it, gracefully)."""

    def __init__(self, spark: SparkSession, config: FleetwatchConfig, bus: str, store: Store) -> None:
        self._spark, self._config, self._bus, self._store = spark, config, bus, store
        self._stop = threading.Event()
        self._supervisor = Supervisor(QUERY_NAME, self._stop, config.spark.restarts, store)
        self._failures: list[str] = []  # each failure the supervisor restarted after, first line
        self._ended: BaseException | None = None  # the failure that ended the run, if one did
        self._thread = threading.Thread(target=self._run, name="supervised-job", daemon=True)
        self._first: RunningQuery | None = None

    @property
    def recorder(self) -> ProgressRecorder:
        """The progress recorder, the same across restarts."""
        assert self._first is not None
        return self._first.recorder

    @property
    def restarted_after(self) -> tuple[str, ...]:
        """The first line of each failure the query was started again after."""
        return tuple(self._failures)

    def unexpected(self) -> str | None:
        """What went wrong other than a Python worker that missed its connect-back, if anything:
        the run ended, or the query failed for another reason."""
        if self._ended is not None:
            return f"the supervised run ended: {self._ended}"
        other = [failure for failure in self._failures if CONNECT_BACK not in failure]
        return f"the query failed: {other[0]}" if other else None

    def __enter__(self) -> SupervisedJob:
        self._first = self._start()
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(120)
        self._supervisor.stop()
        self._spark.streams.removeListener(self.recorder)

    def _start(self, recorder: ProgressRecorder | None = None) -> RunningQuery:
        return start_live_query(self._spark, self._config, self._bus, self._store, stop=self._stop, recorder=recorder)

    def _restart(self, recorder: ProgressRecorder) -> RunningQuery:
        # The supervisor has logged and counted the failure it restarts after.
        self._failures.append(self._supervisor.last_error or "")
        return self._start(recorder)

    def _run(self) -> None:
        assert self._first is not None
        try:
            self._ended = self._supervisor.run(self._first, self._restart)
        except Exception as exc:  # a restart that raised (a ConfigError ends the run): `unexpected()` says it
            self._ended = exc
