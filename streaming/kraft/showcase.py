"""A small real Kafka cluster for the demo, with a real fault every few minutes.

Beside the simulated fleet, `fleetwatch demo` starts one real Apache Kafka 4.4 cluster (one
controller, three brokers, fast fencing), probes it as `fleetwatch probe` would, and takes turns
injecting real faults: a broker frozen with SIGSTOP (heartbeat lost, then fenced by Kafka), and a
broker cut off from the controller while it still serves clients (partitioned). Each fault lasts
`fault_s` seconds and is then undone, so the dashboard shows it fire and resolve.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from streaming.collect.probe import ProbeOptions
from streaming.kraft.cluster import KRaftCluster
from streaming.kraft.probing import BackgroundProbe, target_of

__all__ = ["TARGET", "RealClusterShowcase"]

log = logging.getLogger(__name__)

TARGET = "real-kafka-4.4"


class RealClusterShowcase:
    """Start with `start()`, stop with `stop()`; faults run in a background thread."""

    def __init__(self, workdir: str | Path, bus_bootstrap: str, *, every_s: float = 120, fault_s: float = 25,
                 first_after_s: float = 45) -> None:
        self.cluster = KRaftCluster(Path(workdir) / "real-kafka", brokers=3, controllers=1, partitionable=[2],
                                    session_timeout_ms=3000, heartbeat_interval_ms=500)
        self._bus = bus_bootstrap
        self._every_s, self._fault_s, self._first_after_s = every_s, fault_s, first_after_s
        self._stop = threading.Event()
        self._probe: BackgroundProbe | None = None
        self._thread = threading.Thread(target=self._faults, name="real-kafka-faults", daemon=True)
        self.injected: list[str] = []

    def start(self) -> RealClusterShowcase:
        self.cluster.start()
        self._probe = BackgroundProbe([target_of(TARGET, self.cluster.bootstrap)], self._bus,
                                      ProbeOptions(interval_ms=1000, timeout_ms=900, source="demo-probe")).start()
        self._thread.start()
        log.info("real Kafka cluster up", extra={"target": TARGET, "cluster_id": self.cluster.cluster_id,
                                                 "bootstrap": self.cluster.bootstrap})
        return self

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
            inject()
            try:
                self._stop.wait(self._fault_s)
            finally:
                undo()
            if self._stop.wait(self._every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._probe is not None:
            self._probe.stop()
        self.cluster.stop_all()
