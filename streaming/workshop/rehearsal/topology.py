"""The production topology on one machine (issue 26): every part a real process, started and
stopped here, for `bench/rehearsal.py` and tests/ops/test_deploy_standalone.py.

- the telemetry bus: a 3-node real Kafka 4.4 cluster (combined KRaft), its topics replicated 3 times
  (`min.insync.replicas` 2), read by Spark's kafka connector (`bus.source: spark`);
- the store: PostgreSQL (a server of the rehearsal's own, which it can kill, or a given URL);
- the job: `deploy/spark/submit.sh` to a Spark standalone cluster (a master and 2 workers) or to
  `local[2]`, which gives spark-submit the connector's verified jars (`--jars`); its micro-batches
  capped by `Plan.max_records_per_batch` (the bench's: below the backlog of a minute's outage);
- two probes (`fleetwatch probe`, different source ids, the same targets, each with a `--ready-file` as
  the Kubernetes Deployment's, so it can be rolled as that one rolls), two notifiers (one
  sends, by the store's lease), the dashboard under gunicorn, a simulated healthy fleet
  (`fleetwatch simulate --faults none`, live) for load;
- the real target clusters of `targets.py`; a real HTTP receiver that records every notification.

Each process is a `Service`: restarted 2 s after it dies, as systemd restarts a unit (its
RestartSec is 15 s in deploy/systemd; shorter here to keep a rehearsal short).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from streaming.bus import ensure_topics
from streaming.config import FleetwatchConfig
from streaming.plumbing.jars import connector_jars
from streaming.plumbing.ports import free_port
from streaming.records import topics
from streaming.store import Store
from streaming.workshop.hooks import Hook
from streaming.workshop.kraft import KRaftCluster
from streaming.workshop.paths import ROOT
from streaming.workshop.polling import poll
from streaming.workshop.postgres import PostgresServer, pg_binaries
from streaming.workshop.rehearsal.services import Service
from streaming.workshop.rehearsal.targets import Targets
from streaming.workshop.spark_standalone import SPARK_HOME, Standalone

__all__ = ["Plan", "Topology"]

BUS_PARTITIONS = 2  # of each topic

# The targets' rules: fast fencing, as Kafka's (KRaftCluster's 3000 ms session, heartbeats every 500 ms).
TARGET_RULES = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500, "fenced_grace_ms": 5000,
                "controller_window_ms": 10000}


@dataclass
class Plan:
    """What to start. The defaults are the bench's full topology; the test's is smaller."""

    workdir: Path
    spark_workers: int = 2  # 0: submit to local[2], no standalone cluster
    # A standalone cluster already running to submit to (its caller stops it), instead of one of `spark_workers`.
    standalone: Standalone | None = None
    probes: int = 2
    notifiers: int = 2
    dashboard: bool = True
    simulated_clusters: int = 20  # 0: no simulated fleet
    targets: tuple[str, ...] = ("frozen", "cutoff", "misroute")
    target_brokers: int = 3
    clock_offsets: dict[str, float] = field(default_factory=lambda: {"frozen": 10.0, "cutoff": -10.0})
    store_url: str | None = None  # None: a PostgreSQL server of the rehearsal's own (it can be killed)
    # More spark-submit options (after submit.sh's `--`), e.g. a bigger stack for the driver's threads.
    submit_options: tuple[str, ...] = ()
    # The job's `spark.max_records_per_batch` (None: the job's own, 200,000); bench/rehearsal.py sets
    # one below the backlog of a job down 60 s.
    max_records_per_batch: int | None = None


class Topology:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.workdir = plan.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.bus = KRaftCluster(self.workdir / "bus", brokers=3, extra={
            "default.replication.factor": "3", "min.insync.replicas": "2", "offsets.topic.replication.factor": "3"})
        self.targets = Targets(self.workdir / "targets", plan.targets, brokers=plan.target_brokers,
                               clock_offsets=plan.clock_offsets)
        self.postgres: PostgresServer | None = None
        self.spark: Standalone | None = None
        self.receiver = Hook()
        self.store: Store | None = None
        self.job: Service | None = None
        self.probes: list[Service] = []
        self.notifiers: list[Service] = []
        self.dashboard: Service | None = None
        self.simulator: Service | None = None
        self.dashboard_port = free_port()
        self.metrics_port = free_port()
        self.config_path = self.workdir / "fleetwatch.yaml"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
                    "FLEETWATCH_PYTHON": sys.executable, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                    "FLEETWATCH_CONFIG": str(self.config_path)}
        self.env.pop("PYTEST_CURRENT_TEST", None)

    # ------------------------------------------------------------------ start

    def start(self) -> Topology:
        """Everything, in dependency order; the slow parts (JVMs) start side by side."""
        self.receiver.start()
        failures: list[BaseException] = []

        def run(step) -> None:  # type: ignore[no-untyped-def]
            try:
                step()
            except BaseException as exc:  # re-raised below
                failures.append(exc)

        threads = [threading.Thread(target=run, args=(step,)) for step in
                   (self.targets.start, lambda: self.bus.start(timeout_s=180), self._start_store, self._start_spark)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        ensure_topics(",".join(self.bus.bootstrap), [*topics.TELEMETRY, topics.ALERTS], BUS_PARTITIONS,
                      replication_factor=3, timeout_s=60)
        self._write_config()
        self.store = Store(self.store_url)
        self._start_services()
        return self

    def _start_store(self) -> None:
        if self.plan.store_url is None:
            bin_dir = pg_binaries()
            if bin_dir is None:
                raise RuntimeError("PostgreSQL binaries (initdb, pg_ctl) not installed: apt-get install postgresql")
            self.postgres = PostgresServer(bin_dir).start()
            self.store_url = self.postgres.create_database("rehearsal")
        else:
            self.store_url = self.plan.store_url

    def _start_spark(self) -> None:
        if self.plan.standalone is not None:
            self.spark = self.plan.standalone
        elif self.plan.spark_workers:
            (self.workdir / "spark").mkdir(exist_ok=True)
            self.spark = Standalone(self.workdir / "spark", workers=self.plan.spark_workers)
            self.spark.env.update(PYTHONPATH=str(ROOT))
            self.spark.start()

    @property
    def bus_bootstrap(self) -> str:
        return ",".join(self.bus.bootstrap)

    @property
    def batch_cap(self) -> int:
        """The job's `spark.max_records_per_batch`."""
        return self.plan.max_records_per_batch or FleetwatchConfig().spark.max_records_per_batch

    @property
    def telemetry_partitions(self) -> int:
        """The bus partitions the job reads."""
        return BUS_PARTITIONS * len(topics.TELEMETRY)

    def _write_config(self) -> None:
        config = {
            "bus": {"bootstrap_servers": self.bus_bootstrap, "source": "spark", "partitions": BUS_PARTITIONS},
            "store": {"url": self.store_url},
            "spark": {"master": "local[2]", "checkpoint_dir": str(self.workdir / "checkpoint"),
                      "shuffle_partitions": 2, "restarts": {"first_delay_ms": 1000, "max_delay_ms": 10_000},
                      "max_records_per_batch": self.batch_cap},
            "clusters": self.targets.cluster_configs(TARGET_RULES),
            "alerting": {"receivers": [{"name": "ops", "type": "webhook", "url": self.receiver.url()}]},
        }
        self.config_path.write_text(yaml.safe_dump(config))

    def config_without(self, target: str) -> Path:
        """A copy of the config whose `clusters:` no longer list `target` (a probe's new configuration)."""
        config = yaml.safe_load(self.config_path.read_text())
        config["clusters"] = [c for c in config["clusters"] if c["name"] != target]
        path = self.workdir / f"fleetwatch-without-{target}.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _python(self, *args: str) -> list[str]:
        return [sys.executable, *args]

    def _service(self, name: str, command: list[str], ready_option: str | None = None) -> Service:
        return Service(name, command, self.workdir / f"{name}.log", self.env, cwd=ROOT,
                       ready_option=ready_option).start()

    def probe_command(self, n: int, config: Path | None = None) -> list[str]:
        """Probe `n`'s command line (its --source is the same across restarts and rollouts), with `config`
        (default the rehearsal's); the Service adds its --ready-file, as the Kubernetes Deployment has one."""
        return self._python("-m", "streaming.cli", "probe", "--config", str(config or self.config_path),
                            "--interval-ms", "1000", "--timeout-ms", "900", "--source", self.probe_source(n))

    @staticmethod
    def probe_source(n: int) -> str:
        return f"probe-{n}"

    def _start_services(self) -> None:
        master = self.spark.url if self.spark is not None else "local[2]"
        if not connector_jars():  # submit.sh gives spark-submit the verified connector jars (--jars)
            raise RuntimeError("Spark's kafka connector is not fetched: python -m streaming.plumbing.jars fetch")
        self.job = self._service("job", [
            "bash", str(ROOT / "deploy" / "spark" / "submit.sh"), "--master", master, "--config", str(self.config_path),
            "--metrics-port", str(self.metrics_port), "--",
            "--conf", "spark.executor.memory=512m", "--conf", "spark.cores.max=2", "--conf", "spark.driver.memory=768m",
            "--conf", "spark.ui.enabled=false", "--conf", f"spark.executorEnv.PYTHONPATH={ROOT}",
            *self.plan.submit_options])
        cli = ("-m", "streaming.cli")
        for n in range(self.plan.probes):
            self.probes.append(self._service(f"probe-{n}", self.probe_command(n), ready_option="--ready-file"))
        for n in range(self.plan.notifiers):
            self.notifiers.append(self._service(f"notifier-{n}", self._python(
                "-m", "streaming.notify", "notify", "--config", str(self.config_path), "--interval-ms", "200")))
        if self.plan.dashboard:
            self.dashboard = self._service("dashboard", self._python(
                "-m", "gunicorn", "--workers=2", f"--bind=127.0.0.1:{self.dashboard_port}", "--graceful-timeout=5",
                "dashboard.wsgi:server"))
        if self.plan.simulated_clusters:
            self.simulator = self._service("simulate", self._python(
                *cli, "simulate", "--clusters", str(self.plan.simulated_clusters), "--brokers", "3", "--faults", "none",
                "--duration", "7200", "--seed", "26", "--bootstrap", self.bus_bootstrap, "--config",
                str(self.config_path)))

    # ------------------------------------------------------------------ views

    def dashboard_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.dashboard_port}/", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    def planned_batch(self) -> int | None:
        """The last micro-batch the job's checkpoint has planned (its offsets log; the query is
        streaming/job/live.py's QUERY_NAME): a driver killed then runs it again when it starts."""
        offsets = self.workdir / "checkpoint" / "fleetwatch" / "offsets"
        return max((int(f.name) for f in offsets.iterdir() if f.name.isdigit()), default=None) \
            if offsets.is_dir() else None

    def wait_ready(self, timeout_s: float = 600) -> None:
        """Until the job has committed batches that hold every target's probe answers."""
        from streaming.workshop.rehearsal.scoring import answered

        assert self.store is not None
        poll(lambda: all(answered(self.store, name) for name in self.targets.names), timeout_s,
             "every target answered in the store (the job running)", interval_s=1)
        if self.dashboard is not None:
            poll(self.dashboard_up, 60, "the dashboard under gunicorn", interval_s=1)

    # ------------------------------------------------------------------ stop

    def stop(self) -> None:
        services = [self.simulator, *self.probes, self.job, *self.notifiers, self.dashboard]
        for service in services:
            if service is not None:
                with contextlib.suppress(Exception):
                    service.stop(timeout_s=60 if service is self.job else 20)
        if self.spark is not None and self.spark is not self.plan.standalone:
            self.spark.stop()
        self.targets.stop()
        self.bus.stop_all()
        if self.store is not None:
            self.store.close()
        if self.postgres is not None:
            self.postgres.stop()
        self.receiver.stop()
