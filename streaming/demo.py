"""`fleetwatch demo`: the whole product on the embedded default, in one command.

What runs: the embedded Tansu bus; a simulated fleet with a fault about every minute; the Spark
job; the notifier, delivering every alert to a webhook receiver the demo itself starts on
127.0.0.1 (`streaming.demo_receiver`); the dashboard under gunicorn on http://127.0.0.1:8050; and
with `--real-kafka`, a real Apache Kafka 4.4 cluster probed into the same bus with a real fault
every few minutes (`streaming.kraft.showcase`). Ctrl-C (or SIGTERM, or the terminal closing) stops
every part.

On a terminal the demo shows a banner and one status line (`streaming.console`); every log line,
Spark's and the dashboard's included, goes to `<workdir>/fleetwatch.log`. The work folder is
emptied at each start: old state would replay an old fleet's alerts. Only a folder the demo made is
emptied (`prepare_workdir`): one that is missing, empty, or carries the demo's marker file
(`.fleetwatch-demo`, written into every work folder the demo makes); or, made by a version before
the marker, one holding nothing but what the demo writes, its `fleetwatch.log` among it. Any other
folder (`--workdir var`, where `fleetwatch run` keeps its store and checkpoint) is refused with a
one-line error (exit 2) before anything starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streaming import topics
from streaming.bus import EmbeddedBus
from streaming.clock import now_ms
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, produce_live
from streaming.config import AlertingConfig, ConfigError, FleetwatchConfig, Receiver
from streaming.console import Console, Status, StatusReader, StatusTicker, duration_text, open_console, plural
from streaming.demo_receiver import DemoReceiver
from streaming.logs import LogPipe
from streaming.ports import nobody_listens_on
from streaming.store import Store

if TYPE_CHECKING:
    from streaming.kraft import RealClusterShowcase

__all__ = ["WORKDIR_MARKER", "DemoOptions", "check_workdir", "demo_alerting", "prepare_workdir", "run_demo"]

log = logging.getLogger(__name__)

RECEIVER = "demo-webhook"
# The receiver's signing secret is made afresh for each run and handed to the notifier in memory.
_SECRET_ENV = "FLEETWATCH_DEMO_WEBHOOK_SECRET"
_REAL_KAFKA_EVERY_S = 120

# Written into every work folder the demo makes: only such a folder is ever emptied.
WORKDIR_MARKER = ".fleetwatch-demo"
# Everything the demo writes at the top of its work folder (the store with SQLite's side files, the
# checkpoint, the logs, the received alerts, the real cluster's nodes): a folder made by a version
# before the marker holds nothing else, and always its fleetwatch.log (the first thing it wrote).
_DEMO_ENTRIES = frozenset({"fleetwatch.log", "tansu.log", "fleetwatch.db", "fleetwatch.db-wal", "fleetwatch.db-shm",
                           "fleetwatch.db-journal", "checkpoint", "received.jsonl", "real-kafka"})


@dataclass(frozen=True)
class DemoOptions:
    clusters: int = 20
    brokers: int = 4
    port: int = 8050
    workdir: Path = Path("var/demo")
    first_fault_s: int = 30
    fault_every_s: int = 60
    real_kafka: bool = False
    verbose: bool = False


def demo_alerting(receiver_url: str) -> AlertingConfig:
    """Every alert to the demo's own receiver, and nowhere else: a simulated fault must never page anyone."""
    return AlertingConfig(receivers=[Receiver(name=RECEIVER, type="webhook", url=receiver_url,
                                              secret_env=_SECRET_ENV)])


def check_workdir(workdir: Path) -> None:
    """Refuse (ConfigError, one line) a work folder the demo did not make: it is emptied at start."""
    if not workdir.exists() and not workdir.is_symlink():
        return
    if workdir.is_symlink() or not workdir.is_dir():
        raise ConfigError(f"--workdir {workdir}: not a folder (the demo empties its work folder at start): "
                          "give a new or empty folder")
    entries = {entry.name for entry in workdir.iterdir()}
    if not entries or WORKDIR_MARKER in entries or (entries <= _DEMO_ENTRIES and "fleetwatch.log" in entries):
        return
    other = sorted(entries - _DEMO_ENTRIES) or sorted(entries)
    raise ConfigError(f"--workdir {workdir}: refusing to empty a folder the demo did not make (it holds {other[0]!r} "
                      f"and no {WORKDIR_MARKER}): give a new or empty folder")


def prepare_workdir(workdir: Path) -> None:
    """Empty the work folder (after `check_workdir`) and mark it as the demo's."""
    check_workdir(workdir)
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    (workdir / WORKDIR_MARKER).write_text("made by `fleetwatch demo`: emptied at each start of the demo\n",
                                          encoding="utf-8")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class _Dashboard:
    """`gunicorn dashboard.wsgi:server` on 127.0.0.1 (no development server), its output logged."""

    def __init__(self, store_url: str, port: int) -> None:
        pipe = LogPipe("dashboard")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--workers=1", "--threads=4", f"--bind=127.0.0.1:{port}",
             "--graceful-timeout=5", "dashboard.wsgi:server"],
            stdin=subprocess.DEVNULL, stdout=pipe.fd, stderr=pipe.fd,
            env={**os.environ, "FLEETWATCH_STORE_URL": store_url})
        pipe.close_write_end()
        self.exit_reported = False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _real_kafka(options: DemoOptions, bus: EmbeddedBus, console: Console,
                ticker: StatusTicker) -> RealClusterShowcase | None:
    """The real cluster beside the simulated fleet (not started yet), or None (with one line saying why) when it
    cannot run."""
    from streaming.jars import JarsUnavailable, fetch
    from streaming.kraft import RealClusterShowcase

    ticker.phase = "fetching Apache Kafka 4.4 from Maven Central (once)"
    try:
        if shutil.which("java") is None:
            raise JarsUnavailable("Java 17+ is needed (java is not on PATH)")
        fetch("kafka-4.4.0")
    except JarsUnavailable as exc:
        console.line(f"real Kafka skipped: {exc}")
        return None
    return RealClusterShowcase(options.workdir, bus.bootstrap, every_s=_REAL_KAFKA_EVERY_S)


def run_demo(config: FleetwatchConfig, options: DemoOptions) -> int:
    check_workdir(options.workdir)  # before anything starts (Spark's modules too); emptied below
    from streaming.pipeline import stop_on_signals

    if not nobody_listens_on(options.port):
        raise ConfigError(f"port {options.port} is in use: give the dashboard another one with --port")
    spec = FleetSpec(clusters=options.clusters, brokers=options.brokers, faults=FAULT_KINDS,
                     start_ms=now_ms(), duration_ms=7 * 24 * 3600 * 1000,
                     fault_every_ms=options.fault_every_s * 1000, first_fault_ms=options.first_fault_s * 1000)
    stop = threading.Event()
    stop_on_signals(stop)
    signal.signal(signal.SIGHUP, lambda *_: stop.set())  # the terminal closed: stop every part all the same
    workdir = options.workdir
    prepare_workdir(workdir)
    log_path = workdir / "fleetwatch.log"
    with open_console(log_path, verbose=options.verbose) as console:
        try:
            final, failure = _Demo(config, options, spec, stop, console, log_path).run()
        except KeyboardInterrupt:  # Ctrl-C while PySpark's own SIGINT handler was in place (Spark starting)
            console.closing(f"fleetwatch demo stopped; logs in {log_path}")
            return 0
        except Exception as exc:
            log.exception("the demo failed")
            console.closing(f"fleetwatch demo failed: {_first_line(exc)}; details in {log_path}")
            return 1
        if failure is not None:
            console.closing(f"fleetwatch demo stopped: the streaming job failed: {_first_line(failure)}; "
                            f"details in {log_path}")
            return 1
        console.closing(f"fleetwatch demo stopped after {duration_text(final.elapsed_s)}: "
                        f"{plural(final.batches, 'micro-batch', 'micro-batches')}, "
                        f"{plural(final.alerts_seen, 'alert')} ({final.firing} still firing), "
                        f"{final.delivered or 0} delivered to the demo receiver; logs in {log_path}")
        return 0


class _Demo:
    """Starts every part (each registered to be stopped, in reverse order), runs the job until Ctrl-C."""

    def __init__(self, config: FleetwatchConfig, options: DemoOptions, spec: FleetSpec, stop: threading.Event,
                 console: Console, log_path: Path) -> None:
        self.options = options
        self.spec = spec
        self.stop = stop
        self.console = console
        self.log_path = log_path
        self.workdir = options.workdir
        self.store_url = f"sqlite:///{self.workdir / 'fleetwatch.db'}"
        self.config = config.model_copy(update={
            "spark": config.spark.model_copy(update={"checkpoint_dir": str(self.workdir / "checkpoint")})})
        self.showcase: RealClusterShowcase | None = None

    def run(self) -> tuple[Status, BaseException | None]:
        """The last status and the job's failure (None: stopped by Ctrl-C or SIGTERM)."""
        with ExitStack() as stack:
            try:
                ticker = self._start_parts(stack)
                failure = None if self.stop.is_set() else self._run_job(stack, ticker)
                ticker.phase = None
                with contextlib.suppress(Exception):
                    ticker.tick()
                ticker.phase = "stopping"
                return ticker.last, failure
            finally:
                self.stop.set()  # before any part is stopped, also when one failed to start: threads see it

    def _note(self) -> str | None:
        return f"real Kafka: {self.showcase.state}" if self.showcase is not None else None

    def _start_parts(self, stack: ExitStack) -> StatusTicker:
        from streaming.notify import Notifier, NotifyOptions
        from streaming.pipeline import QUERY_NAME

        store = Store(self.store_url)
        stack.callback(store.close)
        secret = secrets.token_hex(32)
        receiver = stack.enter_context(DemoReceiver(self.workdir / "received.jsonl", secret))
        self._banner(receiver.url)
        ticker = StatusTicker(self.console, StatusReader(store, None, QUERY_NAME, deliveries_shown=True),
                              note=self._note).start()
        stack.callback(ticker.stop)
        ticker.phase = "starting the embedded Kafka bus"
        self.bus = stack.enter_context(EmbeddedBus(topics=topics.ALL, log_path=self.workdir / "tansu.log"))
        log.info("embedded broker on %s", self.bus.bootstrap, extra={"bootstrap": self.bus.bootstrap})
        simulator = threading.Thread(target=produce_live, name="simulator", daemon=True,
                                     args=(Simulation(self.spec), self.bus.bootstrap),
                                     kwargs={"realtime": True, "stop": self.stop})
        simulator.start()
        stack.callback(simulator.join, 10)
        self.dashboard = _Dashboard(self.store_url, self.options.port)
        stack.callback(self.dashboard.stop)
        # httpx logs every request at INFO; the notifier's own records say what was delivered.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        alerting = self.config.model_copy(update={"alerting": demo_alerting(receiver.url)})
        notifier = Notifier(alerting, store, NotifyOptions(), env={_SECRET_ENV: secret})
        notifying = threading.Thread(target=notifier.run, args=(self.stop,), name="notifier", daemon=True)
        notifying.start()
        stack.callback(notifier.close)
        stack.callback(notifying.join, 30)
        self.store = store
        return ticker

    def _banner(self, receiver_url: str) -> None:
        o = self.options
        real_kafka = ("off (--real-kafka adds a real Kafka 4.4 cluster with a real fault every few minutes)"
                      if not o.real_kafka else
                      "a real Kafka 4.4 cluster (1 controller, 3 brokers) as target real-kafka-4.4, "
                      f"a real fault every {_REAL_KAFKA_EVERY_S // 60} min")
        self.console.banner(
            f"fleetwatch demo: {o.clusters} simulated Kafka clusters x {o.brokers} brokers, watched by the Spark job",
            [("dashboard", f"http://127.0.0.1:{o.port}"),
             ("faults", f"one every {o.fault_every_s} s, the first {o.first_fault_s} s in"),
             ("alerts", f"notifier -> the demo's webhook receiver {receiver_url} "
                        f"({self.workdir / 'received.jsonl'})"),
             ("real Kafka", real_kafka),
             ("logs", f"{self.log_path} (--verbose shows them here)"),
             ("stop", "Ctrl-C")])

    def _run_job(self, stack: ExitStack, ticker: StatusTicker) -> BaseException | None:
        from streaming.pipeline import spark_session, start_job, stop_on_signals
        from streaming.sinks import AlertPublisher

        ticker.phase = "starting Spark"
        spark = spark_session(self.config, "fleetwatch-demo")
        stop_on_signals(self.stop)  # creating the SparkContext took over SIGINT
        stack.callback(spark.stop)
        publisher = AlertPublisher(self.bus.bootstrap)
        stack.callback(publisher.close)
        if self.stop.is_set():
            return None
        showcase = None
        if self.options.real_kafka:
            showcase = _real_kafka(self.options, self.bus, self.console, ticker)
        if showcase is not None:
            # Its rules are the job's from the start; its JVMs start once Spark has (2 cores).
            self.config = self.config.model_copy(update={"clusters": [*self.config.clusters,
                                                                      showcase.cluster_config()]})
        ticker.phase = "starting the job"
        job = start_job(spark, self.config, self.bus.bootstrap, self.store, publisher)
        ticker.reader.recorder = job.recorder
        if showcase is not None:
            self.showcase = showcase.start()
            stack.callback(showcase.stop)
        ticker.phase = None
        job.run_until(self.stop, on_poll=self._report_dashboard_exit)
        ticker.phase = "stopping: finishing the current micro-batch"
        self.stop.set()
        job.stop()
        return job.query.exception()

    def _report_dashboard_exit(self) -> None:
        if self.dashboard.process.poll() is not None and not self.dashboard.exit_reported:
            self.dashboard.exit_reported = True
            self.console.line(f"the dashboard exited (code {self.dashboard.process.returncode}); see {self.log_path}")
