"""`fleetwatch demo`: the whole product on the embedded default, in one command.

What runs: the embedded Tansu bus; a simulated fleet with a fault about every minute; the Spark
job; the notifier, delivering every alert to a webhook receiver the demo itself starts on
127.0.0.1 (`streaming.demo.webhook`); the dashboard under gunicorn on http://127.0.0.1:8050; and
with `--real-kafka`, a real Apache Kafka 4.4 cluster probed into the same bus with a real fault
every few minutes (`streaming.workshop.kraft.showcase`). Ctrl-C (or SIGTERM, or the terminal closing) stops
every part.

On a terminal the demo shows a banner and one status line (`streaming.job.console`); every log line,
Spark's and the dashboard's included, goes to `<workdir>/fleetwatch.log`. The work folder is
emptied at each start: old state would replay an old fleet's alerts. Only a folder the demo made is
emptied (`prepare_workdir`): one that is missing, empty, or carries the demo's marker file
(`.fleetwatch-demo`, written into every work folder the demo makes); or, made by a version before
the marker, one holding nothing but what the demo writes, its `fleetwatch.log` among it. Any other
folder (`--workdir var`, where `fleetwatch run` keeps its store and checkpoint) is refused with a
one-line error (exit 2) before anything starts.
"""

from __future__ import annotations

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

from streaming.bus import EmbeddedBus, tansu_binary
from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, produce_live
from streaming.config import AlertingConfig, ConfigError, FleetwatchConfig, Receiver
from streaming.demo.webhook import DemoReceiver
from streaming.job import Console, JobView, duration_text, open_console, plural
from streaming.plumbing.clock import now_ms
from streaming.plumbing.errors import FleetwatchError, first_line
from streaming.plumbing.logs import LogPipe
from streaming.plumbing.ports import nobody_listens_on
from streaming.records import topics

if TYPE_CHECKING:
    from streaming.job import Wiring
    from streaming.workshop.kraft import RealClusterShowcase

__all__ = ["RECEIVER", "WORKDIR_MARKER", "DemoOptions", "check_workdir", "demo_alerting", "prepare_workdir", "run_demo"]

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


def demo_alerting(receiver_url: str, dashboard_port: int = 8050) -> AlertingConfig:
    """Every alert to the demo's own receiver, and nowhere else: a simulated fault must never page anyone.
    Its links lead to the demo's dashboard (its pages and runbooks)."""
    return AlertingConfig(receivers=[Receiver(name=RECEIVER, type="webhook", url=receiver_url,
                                              secret_env=_SECRET_ENV)],
                          dashboard_url=f"http://127.0.0.1:{dashboard_port}")


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


def run_demo(config: FleetwatchConfig, options: DemoOptions) -> int:
    check_workdir(options.workdir)  # before anything starts (Spark's modules too); emptied below
    tansu_binary()  # the demo's bus is the embedded one, an optional extra: without it, say so before anything starts
    from streaming.job import JobCoordinator, LivePlan, query_failure_line, stop_on_signals

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
    # The job keeps its store and checkpoint in the work folder.
    config = config.model_copy(update={
        "store": config.store.model_copy(update={"url": f"sqlite:///{workdir / 'fleetwatch.db'}"}),
        "spark": config.spark.model_copy(update={"checkpoint_dir": str(workdir / "checkpoint")})})
    with open_console(log_path, verbose=options.verbose) as console:
        parts = _DemoParts(config, options, spec, stop, console, log_path)
        view = JobView(console, parts.banner, deliveries_shown=True)
        parts.view = view
        plan = LivePlan(app_name="fleetwatch-demo", companions=parts,
                        embedded_bus=EmbeddedBus(topics=topics.ALL, log_path=workdir / "tansu.log"))
        try:
            outcome = JobCoordinator(config, plan, view, stop).run()
        except KeyboardInterrupt:  # Ctrl-C while PySpark's own SIGINT handler was in place (Spark starting)
            console.closing(f"fleetwatch demo stopped; logs in {log_path}")
            return 0
        except Exception as exc:
            log.exception("the demo failed")
            console.closing(f"fleetwatch demo failed: {first_line(exc, named=True)}; details in {log_path}")
            return exc.exit_code if isinstance(exc, FleetwatchError) else 1  # streaming/plumbing/errors.py's table
        if outcome.failure is not None:
            console.closing("fleetwatch demo stopped: the streaming job failed: "
                            f"{query_failure_line(outcome.failure)}; details in {log_path}")
            failure = outcome.failure
            return failure.exit_code if isinstance(failure, FleetwatchError) else 1
        final = view.last
        console.closing(f"fleetwatch demo stopped after {duration_text(final.elapsed_s)}: "
                        f"{plural(final.batches, 'micro-batch', 'micro-batches')}, "
                        f"{plural(final.alerts_seen, 'alert')} ({final.firing} still firing), "
                        f"{final.delivered or 0} delivered to the demo receiver; logs in {log_path}")
        return 0


class _DemoParts:
    """What the demo runs beside the job (the coordinator's companions, streaming.job.Companions):
    the webhook receiver, the simulated fleet, the dashboard, the notifier, and with --real-kafka
    the real cluster. Each part is registered to be stopped, in reverse order."""

    def __init__(self, config: FleetwatchConfig, options: DemoOptions, spec: FleetSpec, stop: threading.Event,
                 console: Console, log_path: Path) -> None:
        self.job_config = config
        self.options = options
        self.spec = spec
        self.stop = stop
        self.console = console
        self.log_path = log_path
        self.workdir = options.workdir
        self.view: JobView | None = None
        self.receiver_url = ""
        self.dashboard: _Dashboard | None = None
        self.showcase: RealClusterShowcase | None = None
        self._pending_showcase: RealClusterShowcase | None = None
        self._bus = ""

    def start(self, wiring: Wiring, parts: ExitStack) -> None:
        from streaming.notify import Notifier, NotifyOptions

        assert wiring.bus is not None and wiring.store is not None
        self._bus = wiring.bus
        secret = secrets.token_hex(32)
        receiver = parts.enter_context(DemoReceiver(self.workdir / "received.jsonl", secret))
        self.receiver_url = receiver.url
        self.dashboard = _Dashboard(self.job_config.store.url, self.options.port)
        parts.callback(self.dashboard.stop)
        # httpx logs every request at INFO; the notifier's own records say what was delivered.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        alerting = self.job_config.model_copy(update={"alerting": demo_alerting(receiver.url, self.options.port)})
        notifier = Notifier(alerting, wiring.store, NotifyOptions(), env={_SECRET_ENV: secret})
        notifying = threading.Thread(target=notifier.run, args=(self.stop,), name="notifier", daemon=True)
        notifying.start()
        parts.callback(notifier.close)
        parts.callback(notifying.join, 30)

    def banner(self, wiring: Wiring) -> tuple[str, list[tuple[str, str]]]:
        o = self.options
        real_kafka = ("off (--real-kafka adds a real Kafka 4.4 cluster with a real fault every few minutes)"
                      if not o.real_kafka else
                      "a real Kafka 4.4 cluster (1 controller, 3 brokers) as target real-kafka-4.4, "
                      f"a real fault every {_REAL_KAFKA_EVERY_S // 60} min")
        title = f"fleetwatch demo: {o.clusters} simulated Kafka clusters x {o.brokers} brokers"
        return (f"{title}, watched by the Spark job",
                [("dashboard", f"http://127.0.0.1:{o.port}"),
                 ("faults", f"one every {o.fault_every_s} s, the first {o.first_fault_s} s after the job starts"),
                 ("alerts", f"notifier -> the demo's webhook receiver {self.receiver_url} "
                            f"({self.workdir / 'received.jsonl'})"),
                 ("real Kafka", real_kafka),
                 ("logs", f"{self.log_path} (--verbose shows them here)"),
                 ("stop", "Ctrl-C")])

    def config(self, config: FleetwatchConfig) -> FleetwatchConfig:
        """With --real-kafka, the real cluster's rules are the job's from the start; its JVMs start
        once Spark has (2 cores)."""
        if self.options.real_kafka:
            self._pending_showcase = self._real_kafka()
        if self._pending_showcase is None:
            return config
        return config.model_copy(update={"clusters": [*config.clusters, self._pending_showcase.cluster_config()]})

    def started(self, parts: ExitStack) -> None:
        """The simulated fleet starts once the query has: its fault clock counts from there, so the
        time Spark takes to start (long on a loaded machine) does not eat into the healthy fleet the
        job's first micro-batches show before the first fault."""
        simulator = threading.Thread(target=produce_live, name="simulator", daemon=True,
                                     args=(Simulation(self.spec), self._bus),
                                     kwargs={"realtime": True, "stop": self.stop})
        simulator.start()
        parts.callback(simulator.join, 10)
        if self._pending_showcase is not None:
            self.showcase = self._pending_showcase.start()
            parts.callback(self._pending_showcase.stop)

    def poll(self) -> None:
        """Say once that the dashboard exited."""
        if self.dashboard is not None and self.dashboard.process.poll() is not None \
                and not self.dashboard.exit_reported:
            self.dashboard.exit_reported = True
            self.console.line(f"the dashboard exited (code {self.dashboard.process.returncode}); see {self.log_path}")

    def note(self) -> str | None:
        return f"real Kafka: {self.showcase.state}" if self.showcase is not None else None

    def _real_kafka(self) -> RealClusterShowcase | None:
        """The real cluster beside the simulated fleet (not started yet), or None (with one line saying why)
        when it cannot run."""
        from streaming.plumbing.jars import JarsUnavailable, fetch

        try:  # the workshop's (streaming/workshop/): a source checkout's, in no wheel
            from streaming.workshop.kraft import RealClusterShowcase
        except ImportError:
            self.console.line("real Kafka skipped: --real-kafka runs from a source checkout of fleetwatch "
                              "(streaming/workshop/ is in no wheel)")
            return None
        if self.view is not None:
            self.view.phase("fetching Apache Kafka 4.4 from Maven Central (once)")
        try:
            if shutil.which("java") is None:
                raise JarsUnavailable("Java 17+ is needed (java is not on PATH)")
            fetch("kafka-4.4.0")
        except JarsUnavailable as exc:
            self.console.line(f"real Kafka skipped: {exc}")
            return None
        return RealClusterShowcase(self.workdir, self._bus, every_s=_REAL_KAFKA_EVERY_S)
