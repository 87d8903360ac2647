"""The one start sequence of a job, as Burrow's core/burrow.go has one: `JobCoordinator.run`
starts the parts in one order, runs the query, and stops what started in reverse order.

`fleetwatch run` and the spark-submit driver (`run.run_job`), `fleetwatch demo`
(streaming/demo/program.py) and `fleetwatch replay` (`replay.replay_file`) each say what their job is
made of (`JobPlan`) and who is told how it goes (a `JobObserver`: the console draws its banner and
status line from what it is told; the coordinator formats nothing). The order:

1. the bus: the configured one, or an embedded Tansu broker when none is (a replay has none);
2. the store, waited for while the database is down (a replay's is the caller's, or none);
3. Prometheus /metrics on the store, when the plan asks for it;
4. the plan's companions (the demo's receiver, simulator, dashboard and notifier); then the
   observer is told what opened;
5. the Spark session, and SIGINT taken back from it;
6. the alerts topic's publisher, a live job's sink beside the store;
7. the query: startup checks, source, pipeline and batch writer (`live.start_job`,
   `recorded.start_recorded`);
8. running it: a live query until a stop, restarted from its checkpoint when it fails
   (`supervise.Supervisor`); a replay until its file is read;
9. stopping: the query (a live one gracefully: the running micro-batch finishes), then every
   part in reverse order.
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
from streaming.job.live import QUERY_NAME, open_store, start_job
from streaming.job.progress import ProgressRecorder
from streaming.job.query import RunningJob
from streaming.job.recorded import REPLAY_QUERY, Recording, start_recorded
from streaming.job.session import spark_session
from streaming.job.supervise import Supervisor
from streaming.metrics import start_metrics_server
from streaming.plumbing.resilience import Stopping
from streaming.sinks import AlertPublisher, BatchWriter, KeyedAlert
from streaming.store import IncidentScope, Store

__all__ = ["Companions", "JobCoordinator", "JobObserver", "JobPlan", "Outcome", "Unobserved", "Wiring",
           "stop_on_signals"]

log = logging.getLogger(__name__)


def stop_on_signals(stop: threading.Event) -> None:
    """Makes SIGINT and SIGTERM set `stop`, so the caller can stop the query gracefully.

    Call it again once the SparkSession exists: creating the SparkContext replaces the SIGINT
    handler with one that cancels the running jobs, and Ctrl-C would then kill the batch.
    """
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())


@dataclass(frozen=True)
class Wiring:
    """What is open before Spark starts: told to the observer and the companions."""

    query: str
    bus: str | None  # the bus's bootstrap address; None for a replay
    embedded: bool  # the bus is an embedded broker the job started
    store: Store | None
    metrics_url: str | None
    note: Callable[[], str | None]  # what the status line keeps saying (restarts, the companions' state)


class JobObserver(Protocol):
    """Who is told how a job goes (the console's `JobView`). Every call comes from the thread
    that runs the coordinator."""

    def opened(self, wiring: Wiring) -> None: ...  # the parts before Spark are up

    def phase(self, text: str | None) -> None: ...  # what the start or the stop is doing; None: the query runs

    def started(self, job: RunningJob) -> None: ...  # the query runs (its progress: job.recorder)

    def stopping(self) -> None: ...  # the query stopped, or never started; the parts stop next

    def closed(self) -> None: ...  # before the parts opened ahead of `opened` stop


class Unobserved:
    """No one watches (a replay)."""

    def opened(self, wiring: Wiring) -> None:
        pass

    def phase(self, text: str | None) -> None:
        pass

    def started(self, job: RunningJob) -> None:
        pass

    def stopping(self) -> None:
        pass

    def closed(self) -> None:
        pass


class Companions(Protocol):
    """Parts a job runs beside its query (the demo's). Each registers its own stop on `parts`."""

    def start(self, wiring: Wiring, parts: ExitStack) -> None: ...  # after the bus and the store, before Spark

    def config(self, config: FleetwatchConfig) -> FleetwatchConfig: ...  # the job's config, once Spark is up

    def started(self, parts: ExitStack) -> None: ...  # once the query runs

    def poll(self) -> None: ...  # every second while the query runs

    def note(self) -> str | None: ...  # their state, for the status line


@dataclass(frozen=True)
class JobPlan:
    """What a job is made of: the live job over the telemetry topics, unless `recording` is given."""

    app_name: str = "fleetwatch"
    # A live job's bus when it starts its own (the demo's); otherwise one is started only when
    # the config names no bus.
    embedded_bus: EmbeddedBus | None = None
    metrics: tuple[int, str] | None = None  # /metrics on (port, host)
    companions: Companions | None = None
    # A replay: the file, its store (None: the alerts go to `on_alerts` only), where its alerts go,
    # and how long it may take.
    recording: Recording | None = None
    store: Store | None = None
    on_alerts: Callable[[list[KeyedAlert]], Any] | None = None
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class Outcome:
    """How a job ended."""

    failure: BaseException | None = None  # the live query's failure that ended the run
    job: RunningJob | None = None  # None: stopped before the query started
    writer: BatchWriter | None = None  # the replay's (its quarantine counts)


class JobCoordinator:
    """Starts, runs and stops one job (module docstring). `stop` ends a live job (SIGINT and
    SIGTERM set it)."""

    def __init__(self, config: FleetwatchConfig, plan: JobPlan, observer: JobObserver | None = None,
                 stop: threading.Event | None = None) -> None:
        self.config = config
        self.plan = plan
        self.observer: JobObserver = observer if observer is not None else Unobserved()
        self.stop = stop if stop is not None else threading.Event()

    def run(self) -> Outcome:
        live = self.plan.recording is None
        started = time.monotonic()
        if live:
            stop_on_signals(self.stop)
        with ExitStack() as parts:
            try:
                return self._run(parts, live, started)
            finally:
                self.stop.set()  # before any part is stopped, also when one failed to start: threads see it

    def _run(self, parts: ExitStack, live: bool, started: float) -> Outcome:
        config, plan, observer = self.config, self.plan, self.observer
        # 1. the bus
        access, embedded = self._bus(parts) if live else (None, False)
        # 2. the store
        store = open_store(config.store.url, self.stop) if live else plan.store
        if live:
            if store is None:  # asked to stop while the database was down
                return Outcome()
            parts.callback(store.close)
        # 3. /metrics
        metrics_url = None
        if plan.metrics is not None and store is not None:
            port, host = plan.metrics
            parts.callback(start_metrics_server(store, port, host, incidents=IncidentScope.of(config)).stop)
            metrics_url = f"http://{host}:{port}/metrics"
        # 4. the companions; the observer is told
        supervisor = None
        if live and store is not None:
            supervisor = Supervisor(QUERY_NAME, self.stop, config.spark.restarts, store)
        wiring = Wiring(QUERY_NAME if live else REPLAY_QUERY, access.bootstrap if access else None, embedded, store,
                        metrics_url, lambda: self._note(supervisor))
        if plan.companions is not None:
            plan.companions.start(wiring, parts)
        observer.opened(wiring)
        parts.callback(observer.closed)
        try:
            # 5. Spark
            observer.phase("starting Spark")
            spark = spark_session(config, plan.app_name)
            if not live:
                return self._replay(parts, spark, started)
            stop_on_signals(self.stop)  # creating the SparkContext took over SIGINT
            parts.callback(spark.stop)
            # 6. the alerts topic
            assert access is not None and store is not None and supervisor is not None
            publisher = AlertPublisher(access, partitions=config.bus.partitions)
            parts.callback(publisher.close)
            if self.stop.is_set():
                return Outcome()
            if plan.companions is not None:
                config = plan.companions.config(config)
            # 7. the query
            observer.phase("starting the job")

            def start(recorder: ProgressRecorder | None = None) -> RunningJob:
                return start_job(spark, config, access, store, publisher, stop=self.stop, recorder=recorder)

            try:
                job = start()
            except Stopping:  # asked to stop while the start waited for the store
                return Outcome()
            observer.started(job)
            if plan.companions is not None:
                plan.companions.started(parts)
            observer.phase(None)
            # 8. running it, supervised
            try:
                failure = supervisor.run(job, start, show=observer.phase,
                                         on_poll=plan.companions.poll if plan.companions is not None else _nothing)
                observer.phase("stopping: finishing the current micro-batch")
            finally:
                supervisor.stop()  # 9. the query stops first, then the parts
            return Outcome(failure, job)
        finally:
            observer.stopping()

    def _bus(self, parts: ExitStack) -> tuple[BusAccess, bool]:
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
            return BusAccess.from_config(bus_config.bootstrap_servers, bus_config.security), False
        parts.enter_context(bus)
        log.info("embedded broker on %s", bus.bootstrap, extra={"bootstrap": bus.bootstrap})
        return BusAccess(bus.bootstrap), True

    def _note(self, supervisor: Supervisor | None) -> str | None:
        companions = self.plan.companions
        notes = [supervisor.note() if supervisor is not None else None,
                 companions.note() if companions is not None else None]
        return "; ".join(note for note in notes if note) or None

    def _replay(self, parts: ExitStack, spark: SparkSession, started: float) -> Outcome:
        """Steps 7 to 9 for a replay: the file's query, run until it is read, stopped at once. The
        session stays up for the process's next replay (the tests' and benches' share one)."""
        plan, recording = self.plan, self.plan.recording
        assert recording is not None
        writer = BatchWriter(plan.store, on_alerts=plan.on_alerts)
        checkpoint = tempfile.mkdtemp(prefix="fleetwatch-replay-")
        parts.callback(shutil.rmtree, checkpoint, ignore_errors=True)
        self.observer.phase("starting the job")
        job = start_recorded(spark, self.config, recording, writer, checkpoint=checkpoint, store=plan.store)
        parts.callback(spark.streams.removeListener, job.recorder)
        self.observer.started(job)
        self.observer.phase(None)

        def within_time() -> None:
            if time.monotonic() - started > plan.timeout_s:
                raise TimeoutError(f"replay did not finish within {plan.timeout_s:.0f} s")

        try:
            finished = recording.finished()
            if not job.run_until(finished=finished, poll_s=5, on_poll=within_time):
                raise RuntimeError(f"replay query failed: {job.query.exception()}")
        finally:
            job.stop(graceful=False)  # finished, failed or out of time: no batch is worth finishing
        return Outcome(None, job, writer)


def _nothing() -> None:
    pass
