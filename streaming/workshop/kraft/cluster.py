"""Real Apache Kafka KRaft clusters on loopback, as plain JVM processes (no Docker).

Two layouts:
- combined: every node is `broker,controller` and a voter of the metadata quorum;
- separate: `controllers` controller-only nodes (ids 3000, 3001, ...) and broker-only nodes
  (ids 1..n), which are observers of the quorum.

Each node is formatted (`kafka.tools.StorageTool format`) and started (`kafka.Kafka`) from the
classpath `streaming.plumbing.jars` fetched from Maven Central, with fast fencing settings for tests
(`broker.heartbeat.interval.ms`, `broker.session.timeout.ms`: the active controller's setting
decides). A broker listed in `partitionable` reaches the controllers through one `TcpProxy` per
controller, so a test can cut it off from the quorum while it still answers clients.

How the proxy stays in the path: a KRaft node learns the active controller's endpoint from
the quorum itself (KIP-853: Fetch responses carry the leader's advertised endpoint), so a
per-broker address in `controller.quorum.voters` is bypassed after the first reconnect
(measured). Controllers therefore advertise host names (`kraft-c3000`, ...) and every JVM gets
its own hosts file (`-Djdk.net.hosts.file`): for a partitionable broker those names resolve to
127.0.0.2, where its proxies listen on the controllers' port numbers; for every other node, to
127.0.0.1, where the controllers listen.

A node can run with its wall clock shifted (`clock_offsets`, or a node's `clock_offset_s` before a
restart; libfaketime, only for that JVM): a controller whose clock is ahead or behind stamps
DescribeQuorum's LastFetchTimestamps on its own clock.

With `metrics_exporter`, every controller runs the Prometheus JMX exporter agent
(`io.prometheus.jmx:jmx_prometheus_javaagent`, `streaming.plumbing.jars.JMX_EXPORTER`) on its own HTTP port
(`controller_metrics`), exporting the `kafka.controller:type=KafkaController` MBeans with the
exporter's default names: what the probe's controller view reads.

Faults act on processes: `stop` (SIGTERM, controlled shutdown), `kill` (SIGKILL), `freeze`
(SIGSTOP) and `thaw` (SIGCONT). Every node logs to `<workdir>/<node>/server.log`; `stop_all`
leaves the work folder in place, so logs survive a failed test.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from streaming.plumbing.jars import agent_jar, classpath
from streaming.plumbing.ports import free_port
from streaming.workshop.kraft.archive import archive_options, dump_options
from streaming.workshop.kraft.kafka_view import active_controller, describe_brokers
from streaming.workshop.kraft.node import KafkaNode, NodeFailed, clock_environment
from streaming.workshop.kraft.proxy import TcpProxy
from streaming.workshop.kraft.secure_listener import SecureListener
from streaming.workshop.polling import poll

__all__ = ["CONTROLLER_ID_BASE", "KRaftCluster", "new_cluster_id"]

CONTROLLER_ID_BASE = 3000
_PROXY_HOST = "127.0.0.2"  # where a partitionable broker's controller names resolve
_JVM_OPTIONS = ("-Xms64m", "-Xmx320m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", "-Dcom.sun.management.jmxremote=false")
_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: FILE
      fileName: "{log}"
      PatternLayout:
        Pattern: "[%d{{ISO8601}}] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: FILE
    Logger:
      - name: org.apache.kafka.clients
        level: WARN
      - name: kafka.request.logger
        level: WARN
"""
# The exporter agent's configuration: only the controller's own MBeans (the registration states,
# heartbeat ages and counts), named by the exporter's defaults (no rules).
_EXPORTER = 'includeObjectNames: ["kafka.controller:type=KafkaController,*"]\n'


def new_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` makes them (22 URL-safe base64 characters)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class KRaftCluster:
    """A real KRaft cluster of `brokers` brokers (and `controllers` controllers when separate)."""

    def __init__(self, workdir: str | Path, *, brokers: int = 3, controllers: int = 0,
                 cluster_id: str | None = None, bundle: str = "kafka-4.4.0",
                 session_timeout_ms: int = 3000, heartbeat_interval_ms: int = 500,
                 partitionable: Iterable[int] = (), extra: Mapping[str, str] | None = None,
                 secure: SecureListener | None = None, clock_offsets: Mapping[int, float] | None = None,
                 metrics_exporter: bool = False, advertise: Mapping[int, str] | None = None,
                 dump_classes_to: Path | None = None) -> None:
        """`controllers=0` is the combined layout (each broker is also a controller and a voter).
        `advertise`: {broker id: "host:port"} the broker advertises to clients instead of its own
        listener (a proxy or load balancer in front of it, which a test can point elsewhere).
        `secure`: brokers also listen with SASL_SSL (SCRAM-SHA-512) on `secure_port`.
        `metrics_exporter`: every controller serves its metrics to Prometheus (`controller_metrics`).
        `clock_offsets`: {node id: seconds its wall clock runs ahead (negative: behind)}.
        `dump_classes_to`: the nodes write the classes they loaded there at a normal exit (`archive`);
        without it every JVM starts with the bundle's class archive when one was made."""
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.workdir = Path(workdir)
        self.cluster_id = cluster_id or new_cluster_id()
        self.bundle = bundle
        self.dump_classes_to = dump_classes_to
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.extra = dict(extra or {})
        self.advertise = dict(advertise or {})
        self.secure = secure
        self.combined = controllers == 0
        self.nodes: dict[int, KafkaNode] = {}
        for i in range(1, brokers + 1):
            roles = ("broker", "controller") if self.combined else ("broker",)
            self.nodes[i] = KafkaNode(i, roles, self.workdir / f"node-{i}", client_port=free_port(),
                                      controller_port=free_port() if self.combined else None,
                                      secure_port=free_port() if secure else None)
        for i in range(controllers):
            cid = CONTROLLER_ID_BASE + i
            self.nodes[cid] = KafkaNode(cid, ("controller",), self.workdir / f"node-{cid}",
                                        controller_port=free_port())
        if metrics_exporter:
            for node in self.controllers:
                node.metrics_port = free_port()
        for node_id, offset_s in (clock_offsets or {}).items():
            self.nodes[node_id].clock_offset_s = offset_s
        self.partitionable = set(partitionable)
        if self.partitionable - {n.node_id for n in self.brokers}:
            raise ValueError("only brokers can be partitionable")
        if self.combined and self.partitionable:
            raise ValueError("a combined node is itself a voter: partition brokers of the separate layout")
        # One proxy per (partitionable broker, controller): cutting them isolates that broker only.
        self.proxies: dict[int, list[TcpProxy]] = {}

    # ------------------------------------------------------------------ layout

    @property
    def brokers(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.is_broker]

    @property
    def controllers(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.is_controller]

    @property
    def bootstrap(self) -> list[str]:
        return [n.address for n in self.brokers]

    @property
    def secure_bootstrap(self) -> list[str]:
        return [f"127.0.0.1:{n.secure_port}" for n in self.brokers]

    @property
    def controller_addresses(self) -> list[str]:
        return [f"127.0.0.1:{n.controller_port}" for n in self.controllers]

    @property
    def controller_metrics(self) -> list[str]:
        """The controllers' Prometheus endpoints (`metrics_exporter`), as `http://host:port/metrics`."""
        return [n.metrics_url for n in self.controllers if n.metrics_url]

    @staticmethod
    def _controller_host(node: KafkaNode) -> str:
        return f"kraft-c{node.node_id}"

    def _voters(self) -> str:
        return ",".join(f"{c.node_id}@{self._controller_host(c)}:{c.controller_port}" for c in self.controllers)

    def _hosts_file(self, node: KafkaNode) -> str:
        address = _PROXY_HOST if node.node_id in self.partitionable else "127.0.0.1"
        return "127.0.0.1 localhost\n" + "".join(f"{address} {self._controller_host(c)}\n" for c in self.controllers)

    def _properties(self, node: KafkaNode) -> dict[str, str]:
        listeners, protocols = [], ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
        if node.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{node.client_port}")
            if node.secure_port:
                listeners.append(f"SASL_SSL://127.0.0.1:{node.secure_port}")
                protocols.append("SASL_SSL:SASL_SSL")
        if node.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{node.controller_port}")
        props = {
            "process.roles": ",".join(node.roles),
            "node.id": str(node.node_id),
            "controller.quorum.voters": self._voters(),
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": str(node.workdir / "data"),
            "broker.heartbeat.interval.ms": str(self.heartbeat_interval_ms),
            "broker.session.timeout.ms": str(self.session_timeout_ms),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "log.flush.interval.messages": "100000",
        }
        advertised = []
        if node.is_broker:
            advertised.append(f"PLAINTEXT://{self.advertise.get(node.node_id, f'127.0.0.1:{node.client_port}')}")
            props["inter.broker.listener.name"] = "PLAINTEXT"
            if node.secure_port and self.secure is not None:
                advertised.append(f"SASL_SSL://127.0.0.1:{node.secure_port}")
                props |= self.secure.properties()
        if node.is_controller:
            advertised.append(f"CONTROLLER://{self._controller_host(node)}:{node.controller_port}")
        props["advertised.listeners"] = ",".join(advertised)
        props.update(self.extra)
        return props

    def _write_config(self, node: KafkaNode) -> Path:
        node.workdir.mkdir(parents=True, exist_ok=True)
        path = node.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()), encoding="utf-8")
        (node.workdir / "log4j2.yaml").write_text(_LOG4J2.format(log=node.log_path), encoding="utf-8")
        (node.workdir / "hosts").write_text(self._hosts_file(node), encoding="utf-8")
        if node.metrics_port is not None:
            (node.workdir / "exporter.yaml").write_text(_EXPORTER, encoding="utf-8")
        return path

    # ------------------------------------------------------------------ lifecycle

    def _java(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        agent = []
        if node.metrics_port is not None and main == "kafka.Kafka":
            agent = [f"-javaagent:{agent_jar()}=127.0.0.1:{node.metrics_port}:{node.workdir / 'exporter.yaml'}"]
        if self.dump_classes_to is not None:
            classes = dump_options(self.dump_classes_to) if main == "kafka.Kafka" else ()
        else:
            classes = archive_options(self.bundle)
        return ["java", *_JVM_OPTIONS, *classes, *agent, f"-Dlog4j2.configurationFile={node.workdir / 'log4j2.yaml'}",
                f"-Djdk.net.hosts.file={node.workdir / 'hosts'}",
                "-cp", classpath(self.bundle), main, *args]

    def format(self, nodes: Iterable[KafkaNode] | None = None) -> None:
        """Format the storage of `nodes` (default: all) with the cluster id, concurrently."""
        nodes = list(self.nodes.values() if nodes is None else nodes)
        for node in nodes:
            for pid in self.partitionable:
                if pid == node.node_id and pid not in self.proxies:
                    self.proxies[pid] = [TcpProxy(("127.0.0.1", c.controller_port or 0), c.controller_port or 0,
                                                  host=_PROXY_HOST) for c in self.controllers]
        running = []
        for node in nodes:
            config = self._write_config(node)
            with contextlib.suppress(FileNotFoundError):
                for child in sorted((node.workdir / "data").rglob("*"), reverse=True):
                    child.unlink() if child.is_file() else child.rmdir()
            out = (node.workdir / "format.log").open("wb")
            running.append((node, out, subprocess.Popen(
                self._java(node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config),
                           *(self.secure.format_arguments() if self.secure else ())),
                stdout=out, stderr=subprocess.STDOUT)))
        for node, out, proc in running:
            code = proc.wait(timeout=120)
            out.close()
            if code != 0:
                raise NodeFailed(f"formatting node {node.node_id} failed (exit {code})"
                                 f"{_last_error(node.workdir / 'format.log')}: see {node.workdir / 'format.log'}")

    def start_node(self, node_id: int) -> None:
        """Spawn one node (its storage must be formatted); does not wait."""
        node = self.nodes[node_id]
        if node.running:
            return
        config = self._write_config(node)
        out = (node.workdir / "stdout.log").open("ab")
        env = {**os.environ, **clock_environment(node.clock_offset_s)} if node.clock_offset_s else None
        node.process = subprocess.Popen(self._java(node, "kafka.Kafka", str(config)), stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True, env=env)
        out.close()
        node._spawned = time.monotonic()  # type: ignore[attr-defined]
        # The log is appended to: this start's lines begin here (a restart's log holds the last start's).
        node._log_from = node.log_path.stat().st_size if node.log_path.exists() else 0  # type: ignore[attr-defined]

    def wait_node(self, node_id: int, timeout_s: float = 60) -> float:
        """Wait until the node logs that it started; returns seconds since spawn."""
        node = self.nodes[node_id]
        marker = b"Kafka Server started"
        since = getattr(node, "_log_from", 0)  # this start's lines

        def started() -> bool:
            if not node.running:
                raise NodeFailed(f"node {node_id} exited with {node.process.returncode if node.process else None}"
                                 f"{_last_error(node.log_path, since)}: see {node.log_path}")
            with contextlib.suppress(FileNotFoundError), node.log_path.open("rb") as fh:
                fh.seek(since)
                return marker in fh.read()
            return False

        poll(started, timeout_s, f"node {node_id} to start: see {node.log_path}", interval_s=0.1, retry_on=(),
             error=NodeFailed)
        node.started_s = time.monotonic() - node._spawned  # type: ignore[attr-defined]
        return node.started_s

    def start(self, timeout_s: float = 90) -> KRaftCluster:
        """Format, start every node, and wait until every broker is registered and unfenced."""
        self.format()
        for node in self.nodes.values():
            with contextlib.suppress(FileNotFoundError):
                node.log_path.unlink()
            self.start_node(node.node_id)
        for node in self.nodes.values():
            self.wait_node(node.node_id, timeout_s)
        self.wait_unfenced(timeout_s=timeout_s)
        return self

    def restart_node(self, node_id: int, timeout_s: float = 60) -> float:
        self.start_node(node_id)
        return self.wait_node(node_id, timeout_s)

    def stop_node(self, node_id: int, timeout_s: float = 30) -> None:
        """SIGTERM: a broker does a controlled shutdown. SIGKILL after `timeout_s`."""
        node = self.nodes[node_id]
        node.signal(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        node.signal(signal.SIGTERM)
        if node.process is not None:
            try:
                node.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()

    def kill_node(self, node_id: int) -> None:
        node = self.nodes[node_id]
        node.signal(signal.SIGKILL)
        if node.process is not None:
            node.process.wait()

    def freeze(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGSTOP)

    def thaw(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGCONT)

    def cut_from_quorum(self, broker_id: int) -> None:
        """Reset and refuse the broker's connections to every controller; clients still reach it."""
        for proxy in self.proxies[broker_id]:
            proxy.cut()

    def heal(self, broker_id: int) -> None:
        for proxy in self.proxies[broker_id]:
            proxy.heal()

    def stop_all(self) -> None:
        """Kill every process (SIGKILL) and close the proxies.

        The cluster is thrown away after this (a test's, the bench's, the demo's), so nothing is
        owed a controlled shutdown: SIGTERM to every node at once made each broker wait for a quorum
        that was stopping too, 10 s per cluster until it was killed anyway (`stop_node` is the
        controlled shutdown, for the tests about it)."""
        for node in self.nodes.values():
            node.signal(signal.SIGKILL)
        for node in self.nodes.values():
            if node.process is not None:
                node.process.wait()
        for proxies in self.proxies.values():
            for proxy in proxies:
                proxy.close()
        self.proxies.clear()

    def reformat(self, cluster_id: str, timeout_s: float = 90) -> None:
        """Stop everything, format every node with a new cluster id, and start again."""
        self.stop_all()
        self.cluster_id = cluster_id
        self.start(timeout_s)

    def __enter__(self) -> KRaftCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    # ------------------------------------------------------------------ Kafka's own view

    def describe(self, via: int | None = None, timeout_s: float = 3) -> dict[int, bool]:
        """{broker id: fenced} as the cluster reports it (DescribeCluster v2 with fenced brokers)."""
        candidates = [self.nodes[via]] if via is not None else [b for b in self.brokers if b.running]
        return asyncio.run(describe_brokers(candidates, timeout_s))

    def quorum_leader(self, timeout_s: float = 3) -> int:
        """The active controller's id as a controller reports it (-1: none), asked directly (KIP-919)."""
        return asyncio.run(active_controller(self.controllers, timeout_s))

    def wait_unfenced(self, brokers: Iterable[int] | None = None, timeout_s: float = 60) -> None:
        """Wait until `brokers` (default: all running brokers) are registered and unfenced."""
        wanted = set(brokers) if brokers is not None else {b.node_id for b in self.brokers if b.running}
        self.wait_for(lambda view: all(view.get(b) is False for b in wanted), timeout_s,
                      f"brokers {sorted(wanted)} registered and unfenced")

    def wait_fenced(self, broker_id: int, timeout_s: float = 60) -> float:
        """Wait until the cluster reports `broker_id` fenced; returns the wall time it was seen."""
        self.wait_for(lambda view: view.get(broker_id) is True, timeout_s, f"broker {broker_id} fenced")
        return time.time()

    def wait_for(self, check, timeout_s: float, what: str) -> dict[int, bool]:  # type: ignore[no-untyped-def]
        view: dict[int, bool] = {}

        def seen() -> tuple[dict[int, bool]] | None:
            nonlocal view
            view = self.describe()
            return (view,) if check(view) else None  # a tuple: an empty view may be the one awaited

        return poll(seen, timeout_s, lambda: f"{what}; last view {view}; logs in {self.workdir}", interval_s=0.1,
                    retry_on=(NodeFailed,), error=NodeFailed)[0]


def _last_error(log: Path, since: int = 0) -> str:
    """The last ERROR or exception line of a node's log from byte `since` (this start's lines), for the
    failure's message: the log itself goes with the test's temporary folder."""
    with contextlib.suppress(OSError), log.open("rb") as fh:
        fh.seek(since)
        lines = [line for line in fh.read().decode(errors="replace").splitlines()
                 if " ERROR " in line or "Exception" in line]
        if lines:
            return f" ({lines[-1].strip()[:300]})"
    return ""
