"""The one start sequence of a job, as Burrow's core/burrow.go has one: `JobCoordinator.run`
starts the parts in one order, runs the query, and stops what started in reverse order.

`fleetwatch run` and the spark-submit driver (`run.run_job`), `fleetwatch demo`
(streaming/demo/program.py) and `fleetwatch replay` (`replay.replay_file`) each say what their job is
made of (a `LivePlan` or a `ReplayPlan`, streaming/job/plans.py) and who is told how it goes (a
`JobObserver`: the console draws its banner and status line from what it is told; the coordinator
formats nothing). The order:

1. the bus: the configured one, or an embedded Tansu broker when none is (a replay has none);
2. the store, waited for while the database is down (a replay's is the caller's, or none);
3. Prometheus /metrics on the store, when the plan asks for it;
4. the plan's companions (the demo's receiver, simulator, dashboard and notifier); then the
   observer is told what opened;
5. the Spark session, and SIGINT taken back from it (a replay's session stays up for the
   process's next replay: the tests' and benches' share one);
6. what the query writes to: a live job's alerts topic publisher, beside the store; a replay's
   batch writer and checkpoint folder;
7. the query: startup checks, source, pipeline and batch writer (`live.start_live_query`,
   `recorded.start_recorded_query`);
8. running it: a live query until a stop, restarted from its checkpoint when it fails
   (`supervise.Supervisor`); a replay until its file is read, within the plan's time;
9. stopping: the query (a live one gracefully: the running micro-batch finishes), then every
   part in reverse order.

One sequence runs both plans: where a live job and a replay differ, the plan's steps say what
happens (`_LiveSteps`, `_ReplaySteps`), chosen once from the plan's kind.
"""

from __future__ import annotations

import logging
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import SparkSession

from streaming.bus import BusAccess, BusError, EmbeddedBus, tansu_binary
from streaming.config import FleetwatchConfig
from streaming.detect import SecondPass
from streaming.job.live import QUERY_NAME, open_store, start_live_query
from streaming.job.plans import Companions, LivePlan, Plan, ReplayPlan, Wiring
from streaming.job.progress import ProgressRecorder
from streaming.job.query import RunningQuery
from streaming.job.recorded import REPLAY_QUERY, start_recorded_query
from streaming.job.session import spark_session
from streaming.job.supervise import Supervisor
from streaming.metrics import start_metrics_server
from streaming.plumbing.resilience import Stopping
from streaming.sinks import AlertPublisher, BatchWriter
from streaming.store import IncidentScope, Store

__all__ = ["JobCoordinator", "JobObserver", "Outcome", "Unobserved", "stop_on_signals"]

log = logging.getLogger(__name__)


def stop_on_signals(stop: threading.Event) -> None:
    """Makes SIGINT and SIGTERM set `stop`, so the caller can stop the query gracefully.

    Call it again once the SparkSession exists: creating the SparkContext replaces the SIGINT
    handler with one that cancels the running jobs, and Ctrl-C would then kill the batch.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


class JobObserver(Protocol):
    """Who is told how a job goes (the console's `JobView`). Every call comes from the thread
    that runs the coordinator."""

    def opened(self, wiring: Wiring) -> None: ...  # the parts before Spark are up

    def phase(self, text: str | None) -> None: ...  # what the start or the stop is doing; None: the query runs

    def started(self, query: RunningQuery) -> None: ...  # the query runs (its progress: query.recorder)

    def stopping(self) -> None: ...  # the query stopped, or never started; the parts stop next

    def closed(self) -> None: ...  # before the parts opened ahead of `opened` stop


class Unobserved:
    """No one watches (a replay)."""

    def opened(self, wiring: Wiring) -> None:
        pass

    def phase(self, text: str | None) -> None:
        pass

    def started(self, query: RunningQuery) -> None:
        pass

    def stopping(self) -> None:
        pass

    def closed(self) -> None:
        pass


@dataclass(frozen=True)
class Outcome:
    """How a job ended."""

    failure: BaseException | None = None  # the live query's failure that ended the run
    query: RunningQuery | None = None  # None: stopped before the query started
    writer: BatchWriter | None = None  # the replay's (its quarantine counts)


class JobCoordinator:
    """Starts, runs and stops one job (module docstring). `stop` ends a live job (SIGINT and
    SIGTERM set it)."""

    def __init__(self, config: FleetwatchConfig, plan: Plan, observer: JobObserver | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.plan = plan
        self.observer: JobObserver = observer if observer is not None else Unobserved()
        self.stop = stop if stop is not None else threading.Event()

    def run(self) -> Outcome:
        steps: _Steps
        if isinstance(self.plan, ReplayPlan):
            steps = _ReplaySteps(self.plan)
        else:
            steps = _LiveSteps(self.config, self.plan, self.stop)
        steps.take_signals()
        with ExitStack() as parts:
            try:
                return self._run(parts, steps)
            finally:
                self.stop.set()  # before any part is stopped, also when one failed to start: threads see it

    def _run(self, parts: ExitStack, steps: _Steps) -> Outcome:
        config, observer, companions = self.config, self.observer, steps.companions
        # 1. the bus
        access, embedded = steps.bus(parts)
        # 2. the store
        try:
            store = steps.store(parts)
        except Stopping:  # asked to stop while the database was down
            return Outcome()
        # 3. /metrics
        metrics_url = None
        if steps.metrics is not None and store is not None:
            port, host = steps.metrics
            parts.callback(start_metrics_server(store, port, host, incidents=IncidentScope.of(config)).stop)
            metrics_url = f"http://{host}:{port}/metrics"
        # 4. the companions; the observer is told
        wiring = Wiring(steps.query_name, access.bootstrap if access else None, embedded, store, metrics_url,
                        lambda: _note(steps))
        if companions is not None:
            companions.start(wiring, parts)
        observer.opened(wiring)
        parts.callback(observer.closed)
        try:
            # 5. Spark
            observer.phase("starting Spark")
            spark = spark_session(config, self.plan.app_name)
            steps.session(spark, parts)
            # 6. what the query writes to
            if not steps.prepare(parts):
                return Outcome()
            if companions is not None:
                config = companions.config(config)
            # 7. the query
            observer.phase("starting the job")
            try:
                query = steps.start(spark, config, parts)
            except Stopping:  # asked to stop while the start waited for the store
                return Outcome()
            observer.started(query)
            if companions is not None:
                companions.started(parts)
            observer.phase(None)
            # 8. running it; 9. the query stops first, then the parts
            return steps.run(query, observer.phase)
        finally:
            observer.stopping()


class _Steps(Protocol):
    """What one run of a plan does at the steps where a live job and a replay differ (module
    docstring), called in the sequence's order."""

    query_name: str
    metrics: tuple[int, str] | None  # /metrics on (port, host)
    companions: Companions | None

    def take_signals(self) -> None: ...  # before any part starts

    def bus(self, parts: ExitStack) -> tuple[BusAccess | None, bool]: ...  # 1: its access, and whether embedded

    def store(self, parts: ExitStack) -> Store | None: ...  # 2: raises Stopping when asked to stop meanwhile

    def note(self) -> str | None: ...  # for the status line

    def session(self, spark: SparkSession, parts: ExitStack) -> None: ...  # 5: once the session is up

    def prepare(self, parts: ExitStack) -> bool: ...  # 6; False: asked to stop meanwhile

    def start(self, spark: SparkSession, config: FleetwatchConfig, parts: ExitStack) -> RunningQuery: ...  # 7

    def run(self, query: RunningQuery, show: Callable[[str | None], Any]) -> Outcome: ...  # 8, and the query's stop


class _LiveSteps:
    """The live job's steps: its bus and store, supervision, a graceful stop."""

    query_name = QUERY_NAME

    def __init__(self, config: FleetwatchConfig, plan: LivePlan, stop: threading.Event) -> None:
        self.config = config
        self.plan = plan
        self.metrics = plan.metrics
        self.companions = plan.companions
        self._stop = stop
        self._access: BusAccess | None = None
        self._store: Store | None = None
        self._supervisor: Supervisor | None = None
        self._publisher: AlertPublisher | None = None
        self._start: Callable[..., RunningQuery] | None = None

    def take_signals(self) -> None:
        stop_on_signals(self._stop)  # the query then stops gracefully

    def bus(self, parts: ExitStack) -> tuple[BusAccess, bool]:
        """The bus's access, and whether it is an embedded broker started here."""
        bus_config = self.config.bus
        bus = self.plan.embedded_bus
        if bus is None and bus_config.bootstrap_servers is None:
            try:
                tansu_binary()  # an optional extra: a production install without it needs a configured bus
            except BusError as exc:
                raise BusError(f"no bus is configured (bus.bootstrap_servers) and {exc}") from exc
            bus = EmbeddedBus(partitions=bus_config.partitions)
        if bus is None:  # a configured bus is reached with its security; the embedded one is plain loopback
            self._access = BusAccess.from_config(bus_config.bootstrap_servers, bus_config.security)
            return self._access, False
        parts.enter_context(bus)
        log.info("embedded broker on %s", bus.bootstrap, extra={"bootstrap": bus.bootstrap})
        self._access = BusAccess(bus.bootstrap)
        return self._access, True

    def store(self, parts: ExitStack) -> Store:
        """The job's store, waited for while the database is down; the query's supervisor on it."""
        store = open_store(self.config.store.url, self._stop)
        if store is None:
            raise Stopping("asked to stop while the store was out of reach")
        parts.callback(store.close)
        self._store = store
        self._supervisor = Supervisor(QUERY_NAME, self._stop, self.config.spark.restarts, store)
        return store

    def note(self) -> str | None:
        return self._supervisor.note() if self._supervisor is not None else None

    def session(self, spark: SparkSession, parts: ExitStack) -> None:
        stop_on_signals(self._stop)  # creating the SparkContext took over SIGINT
        parts.callback(spark.stop)

    def prepare(self, parts: ExitStack) -> bool:
        assert self._access is not None
        self._publisher = AlertPublisher(self._access, partitions=self.config.bus.partitions)
        parts.callback(self._publisher.close)
        return not self._stop.is_set()

    def start(self, spark: SparkSession, config: FleetwatchConfig, parts: ExitStack) -> RunningQuery:
        access, store, publisher = self._access, self._store, self._publisher
        assert access is not None and store is not None

        def start(recorder: ProgressRecorder | None = None) -> RunningQuery:
            return start_live_query(spark, config, access, store, publisher, stop=self._stop, recorder=recorder)

        self._start = start
        return start()

    def run(self, query: RunningQuery, show: Callable[[str | None], Any]) -> Outcome:
        """Supervised: restarted from its checkpoint when it fails, until a stop."""
        supervisor, companions = self._supervisor, self.companions
        assert supervisor is not None and self._start is not None
        try:
            failure = supervisor.run(query, self._start, show=show,
                                     on_poll=companions.poll if companions is not None else _nothing)
            show("stopping: finishing the current micro-batch")
        finally:
            supervisor.stop()
        return Outcome(failure, query)


class _ReplaySteps:
    """A replay's steps: no bus, the caller's store, the file's query run until it is read, within
    the plan's time, and stopped at once."""

    query_name = REPLAY_QUERY
    metrics = None
    companions = None

    def __init__(self, plan: ReplayPlan) -> None:
        self.plan = plan
        self._started = time.monotonic()
        self._writer: BatchWriter | None = None
        self._checkpoint = ""

    def take_signals(self) -> None:
        pass  # Ctrl-C interrupts a replay as any command: none of its batches is worth finishing

    def bus(self, parts: ExitStack) -> tuple[None, bool]:
        return None, False

    def store(self, parts: ExitStack) -> Store | None:
        return self.plan.store  # the caller's: it closes it

    def note(self) -> str | None:
        return None

    def session(self, spark: SparkSession, parts: ExitStack) -> None:
        pass  # it stays up for the process's next replay

    def prepare(self, parts: ExitStack) -> bool:
        self._checkpoint = tempfile.mkdtemp(prefix="fleetwatch-replay-")
        parts.callback(shutil.rmtree, self._checkpoint, ignore_errors=True)
        return True

    def start(self, spark: SparkSession, config: FleetwatchConfig, parts: ExitStack) -> RunningQuery:
        # The second pass's state stays in memory: a replay is never run again from its checkpoint.
        self._writer = BatchWriter(self.plan.store, on_alerts=self.plan.on_alerts,
                                   second_pass=SecondPass(config.rule_book()))
        query = start_recorded_query(spark, config, self.plan.recording, self._writer, checkpoint=self._checkpoint,
                                     store=self.plan.store)
        parts.callback(spark.streams.removeListener, query.recorder)
        return query

    def run(self, query: RunningQuery, show: Callable[[str | None], Any]) -> Outcome:
        """Until the file is read; the query stops at once after it, when it fails or is out of time."""
        plan = self.plan

        def within_time() -> None:
            if time.monotonic() - self._started > plan.timeout_s:
                raise TimeoutError(f"replay did not finish within {plan.timeout_s:.0f} s")

        try:
            finished = plan.recording.finished()
            if not query.run_until(finished=finished, poll_s=5, on_poll=within_time):
                raise RuntimeError(f"replay query failed: {query.query.exception()}")
        finally:
            query.stop(graceful=False)  # finished, failed or out of time: no batch is worth finishing
        return Outcome(None, query, self._writer)


def _note(steps: _Steps) -> str | None:
    companions = steps.companions
    notes = [steps.note(), companions.note() if companions is not None else None]
    return "; ".join(note for note in notes if note) or None


def _nothing() -> None:
    pass
