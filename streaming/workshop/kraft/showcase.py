"""A small real Kafka cluster for the demo, with a real fault every few minutes.

Beside the simulated fleet, `fleetwatch demo --real-kafka` starts one real Apache Kafka 4.4 cluster
(one controller, three brokers, fast fencing), probes it as `fleetwatch probe` would into the
demo's bus (target `real-kafka-4.4`), and takes turns injecting real faults: a broker frozen with
SIGSTOP (heartbeat lost, then fenced by Kafka), and a broker cut off from the controller while it
still serves clients (partitioned). Each fault lasts `fault_s` seconds and is then undone, so the
dashboard shows it fire and resolve.

Everything runs in one background thread: `start()` returns at once (the cluster takes ~20 s to
come up) and `state` says where it is; `stop()` undoes the fault in progress, stops the probe and
every Kafka process, also while the cluster is still starting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from streaming.collect.probe import ProbeOptions
from streaming.config import ClusterConfig, RuleOverrides
from streaming.workshop.kraft.cluster import KRaftCluster
from streaming.workshop.kraft.node import NodeFailed
from streaming.workshop.kraft.probing import BackgroundProbe, target_of

__all__ = ["TARGET", "RealClusterShowcase"]

log = logging.getLogger(__name__)

TARGET = "real-kafka-4.4"
# Kafka's fast fencing settings for the cluster, and the rules an SRE would set to match them (as
# tests/pipeline/test_real_kafka_faults.py does): fleetwatch's default 9 s session timeout and 30 s fenced
# grace would outlast a 25 s fault.
SESSION_TIMEOUT_MS = 3000
FENCED_GRACE_MS = 5000


class RealClusterShowcase:
    def __init__(self, workdir: str | Path, bus_bootstrap: str, *, every_s: float = 120, fault_s: float = 25,
                 first_after_s: float = 45) -> None:
        self.cluster = KRaftCluster(Path(workdir) / "real-kafka", brokers=3, controllers=1, partitionable=[2],
                                    session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=500)
        self._bus = bus_bootstrap
        self._every_s, self._fault_s, self._first_after_s = every_s, fault_s, first_after_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="real-kafka", daemon=True)
        self.state = "starting"  # starting | up | the fault in progress | failed | stopped
        self.injected: list[str] = []

    def cluster_config(self) -> ClusterConfig:
        """The cluster as the job's config names it: its id pinned, its rules matching Kafka's settings."""
        return ClusterConfig(name=TARGET, expected_cluster_id=self.cluster.cluster_id,
                             rules=RuleOverrides(session_timeout_ms=SESSION_TIMEOUT_MS,
                                                 fenced_grace_ms=FENCED_GRACE_MS))

    def start(self) -> RealClusterShowcase:
        self._thread.start()
        return self

    def _run(self) -> None:
        probe: BackgroundProbe | None = None
        try:
            if not self._start_cluster():
                return
            probe = BackgroundProbe([target_of(TARGET, self.cluster.bootstrap)], self._bus,
                                    ProbeOptions(interval_ms=1000, timeout_ms=900, source="demo-probe")).start()
            self.state = "up"
            log.info("real Kafka cluster up", extra={"target": TARGET, "cluster_id": self.cluster.cluster_id,
                                                     "bootstrap": self.cluster.bootstrap})
            self._faults()
        except Exception:
            if not self._stop.is_set():  # a start cut short by stop() is no failure
                log.exception("the real Kafka cluster failed", extra={"target": TARGET})
                self.state = "failed"
        finally:
            if probe is not None:
                probe.stop()
            self.cluster.stop_all()
            if self.state != "failed":
                self.state = "stopped"

    def _start_cluster(self) -> bool:
        """`KRaftCluster.start`, step by step, so that `stop()` cuts it short; False when stopped."""
        self.cluster.format()
        for node_id in self.cluster.nodes:
            if self._stop.is_set():
                return False
            self.cluster.start_node(node_id)
        for node_id in self.cluster.nodes:
            if self._stop.is_set():
                return False
            self.cluster.wait_node(node_id, timeout_s=90)
        # Probing before every broker is unfenced would report the start-up as fenced brokers.
        deadline = time.monotonic() + 90
        while not self._stop.is_set():
            try:
                self.cluster.wait_unfenced(timeout_s=2)
                return True
            except NodeFailed:
                if time.monotonic() > deadline:
                    raise
        return False

    def _faults(self) -> None:
        faults: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
            ("broker 3 frozen (SIGSTOP)", lambda: self.cluster.freeze(3), lambda: self.cluster.thaw(3)),
            ("broker 2 cut off from the controller", lambda: self.cluster.cut_from_quorum(2),
             lambda: self.cluster.heal(2)),
        ]
        turn = 0
        if self._stop.wait(self._first_after_s):
            return
        while not self._stop.is_set():
            name, inject, undo = faults[turn % len(faults)]
            turn += 1
            log.info("injecting a real fault", extra={"target": TARGET, "fault": name, "for_s": self._fault_s})
            self.injected.append(name)
            self.state = name
            inject()
            try:
                self._stop.wait(self._fault_s)
            finally:
                undo()
                self.state = "up"
                log.info("real fault undone", extra={"target": TARGET, "fault": name})
            if self._stop.wait(self._every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        if self.state == "starting":
            self.cluster.stop_all()  # cuts the start short: waiting for a node that exited fails at once
        self._thread.join(timeout=60)
