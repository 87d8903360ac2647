"""The controller's own view (issue 31) on a real Apache Kafka 4.4 cluster: the controller runs the
Prometheus JMX exporter agent, the probe reads each broker's registration state and heartbeat age
from it, and its events go through the detection engines (`streaming.detect.detect`, the job's
engines, a micro-batch per event), without Spark and without a bus.

One cluster for the module (1 controller, 3 brokers, `broker.session.timeout.ms` 6000, heartbeats
every 500 ms; the rules know the same session timeout):
- a frozen broker (SIGSTOP): `broker.heartbeat_late` fires before Kafka fences it, and resolves
  when it heartbeats again after SIGCONT;
- a controlled shutdown that hangs: broker 3 leads partitions, broker 1 is frozen (Kafka holds a
  controlled shutdown until every active broker has caught up with it, and a frozen broker never
  does until it is fenced): broker 3 reads STOPPING (CONTROLLED_SHUTDOWN) for seconds and
  `broker.stuck_stopping` fires. Then the probe misses the broker's return (no round while it is
  killed and restarted, as when a round is skipped or the probe restarts): it reads STOPPING and
  next ONLINE, `broker.illegal_transition`.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.collect.probe import ProbeOptions, Prober, Target
from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.plumbing import clock
from streaming.records.contract import event_from_dict
from streaming.workshop.kraft import KRaftCluster
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka]

SESSION_TIMEOUT_MS = 6000
ROUND_S = 0.5
BOOK = FleetwatchConfig.model_validate({"rules": {
    "session_timeout_ms": SESSION_TIMEOUT_MS, "heartbeat_interval_ms": 500, "heartbeat_late_ratio": 0.5,
    "stopping_timeout_ms": 2000, "fenced_grace_ms": 60000}}).rule_book()
PROBE = ProbeOptions(interval_ms=500, timeout_ms=450, source="probe-controller-view")


class Recorder:
    """The real probe with the controller view, a round every `ROUND_S`, in a thread; `paused`
    stops the rounds (the probe misses what happens meanwhile)."""

    def __init__(self, cluster: KRaftCluster) -> None:
        target = Target(name="view", bootstrap=tuple(("127.0.0.1", n.client_port or 0) for n in cluster.brokers),
                        controller_metrics=tuple(cluster.controller_metrics), session_timeout_ms=SESSION_TIMEOUT_MS,
                        heartbeat_interval_ms=500)
        self.prober = Prober([target], PROBE)
        self.events: list[dict[str, Any]] = []
        self.cid = cluster.cluster_id
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="view-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self.paused.is_set():
                self.events.extend(self.prober.probe_round(clock.now_ms()))
            self._stop.wait(ROUND_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def states(self, broker: int) -> list[dict[str, Any]]:
        return [ev for ev in list(self.events) if ev["type"] == "broker_state" and ev["broker_id"] == broker]

    def last_state(self, broker: int) -> str | None:
        states = self.states(broker)
        return states[-1]["state"] if states else None

    def alerts(self, broker: int) -> list[tuple[str, str, int, int | None]]:
        events = [event_from_dict(ev) for ev in list(self.events)]
        return [(a.rule, a.status, a.starts_at, a.ends_at) for a in detect(events, BOOK, batch_size=1)
                if a.broker_id == broker and a.cluster_id == self.cid]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KRaftCluster]:
    kafka = KRaftCluster(Path(tmp_path_factory.mktemp("controller-view")), brokers=3, controllers=1,
                         session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=500, metrics_exporter=True)
    try:
        kafka.start(timeout_s=120)
        yield kafka
    finally:
        kafka.stop_all()


@pytest.fixture
def recorder(cluster: KRaftCluster) -> Iterator[Recorder]:
    rec = Recorder(cluster)
    try:
        poll(lambda: all(rec.last_state(b) == "ONLINE" for b in (1, 2, 3)), 60, "every broker ONLINE in the view")
        yield rec
    finally:
        rec.stop()


def test_a_frozen_broker_is_late_before_kafka_fences_it_and_resolves_when_it_heartbeats(cluster, recorder):
    cluster.freeze(2)
    try:
        poll(lambda: recorder.last_state(2) == "FENCED", 60, "Kafka fencing the frozen broker 2")
    finally:
        cluster.thaw(2)
    poll(lambda: recorder.last_state(2) == "ONLINE", 60, "broker 2 ONLINE again")
    poll(lambda: any(r == "broker.heartbeat_late" and s == "resolved" for r, s, *_ in recorder.alerts(2)), 30,
         "heartbeat_late resolved")
    fenced_at = next(ev["ts"] for ev in recorder.states(2) if ev["state"] == "FENCED")
    alerts = recorder.alerts(2)
    print("broker 2:", alerts, "fenced seen at", fenced_at)
    late = [a for a in alerts if a[0] == "broker.heartbeat_late"]
    assert late[0][1] == "firing" and late[0][2] < fenced_at, (late, fenced_at)
    assert late[1][1] == "resolved" and late[1][3] is not None and late[1][3] > fenced_at
    # The states came from the controller's view: ONLINE -> FENCED -> ONLINE, each once.
    assert [ev["state"] for ev in recorder.states(2)] == ["ONLINE", "FENCED", "ONLINE"]
    assert all(not r.startswith("broker.illegal") for r, *_ in alerts)


def test_a_hung_controlled_shutdown_is_stuck_and_a_missed_return_is_an_illegal_transition(cluster, recorder):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="controller-view-test")
    try:
        admin.create_topics([NewTopic("led-by-3", num_partitions=-1, replication_factor=-1,
                                      replica_assignments={p: [3, 2, 1] for p in range(4)})])
    finally:
        admin.close()
    cluster.freeze(1)  # Kafka holds broker 3's controlled shutdown until broker 1 catches up or is fenced
    try:
        cluster.nodes[3].signal(signal.SIGTERM)
        poll(lambda: recorder.last_state(3) == "STOPPING", 30, "broker 3 STOPPING in the controller's view")
        stopping_at = recorder.states(3)[-1]["ts"]
        poll(lambda: clock.now_ms() > stopping_at + 3000 and recorder.last_state(3) == "STOPPING", 30,
             "broker 3 STOPPING for 3 s")
        recorder.paused.set()
        cluster.kill_node(3)
    finally:
        cluster.thaw(1)
    cluster.restart_node(3, timeout_s=120)
    cluster.wait_unfenced([1, 2, 3], timeout_s=120)
    recorder.paused.clear()
    poll(lambda: recorder.last_state(3) == "ONLINE", 30, "broker 3 ONLINE in the controller's view")
    alerts = recorder.alerts(3)
    print("broker 3:", [ev["state"] for ev in recorder.states(3)], alerts)
    rules = {(r, s) for r, s, *_ in alerts}
    stuck = next(a for a in alerts if a[0] == "broker.stuck_stopping")
    assert stuck[2] == stopping_at + 2000
    assert ("broker.stuck_stopping", "resolved") in rules
    assert ("broker.illegal_transition", "firing") in rules
