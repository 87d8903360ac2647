"""The real probe against real Apache Kafka 4.4 KRaft clusters, its output run through the detection
engines (`streaming.detect.detect`, the engines the Spark job runs, cut into one micro-batch per
probe round, with the watermark and lateness of the job), without Spark and without a bus.

- One clock per probe (issue 26 point 3): a controller whose wall clock runs 10 s ahead, and one
  10 s behind (libfaketime, only in that controller's JVM). The heartbeats the probe derives from
  their DescribeQuorum answers are stamped on the probe's own clock, and the ahead cluster does
  not push the other's events behind the watermark (no false `broker.heartbeat_lost`).
- A new leader epoch is a new controller (issue 31 point 1): the single controller of a cluster
  killed with SIGKILL and started again 30 s later; Kafka fences nobody, neither does fleetwatch.

Kafka runs with fast fencing (`broker.session.timeout.ms` 3000, heartbeats every 500 ms), the
rules with the same session timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.healthy_kafka import PROBE

from streaming.collect.probe import Prober
from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.plumbing import clock
from streaming.records.alert import Alert
from streaming.records.contract import event_from_dict
from streaming.workshop.kraft import CONTROLLER_ID_BASE, KRaftCluster, target_of
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka]

SESSION_TIMEOUT_MS = 3000
LATENESS_MS = 5000
SKEW_S = 10.0
DOWN_S = 30  # the field report's restart of the single controller
# A heartbeat is the broker's last fetch from the leader: at most a fetch round trip of KRaft
# (the leader holds a follower's Fetch up to 500 ms) before the probe's answer, never after it.
MAX_HEARTBEAT_AGE_MS = 1500
BOOK = FleetwatchConfig.model_validate({"rules": {"session_timeout_ms": SESSION_TIMEOUT_MS}}).rule_book()


class Recorder:
    """The real probe in a thread, a round every `PROBE.interval_ms`: each round's events with the
    probe clock's reading before and after the round."""

    def __init__(self, prober: Prober) -> None:
        self.prober = prober
        self.rounds: list[tuple[int, int, list[dict[str, Any]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe-recorder", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            before = clock.now_ms()
            events = self.prober.probe_round(before)
            self.rounds.append((before, clock.now_ms(), events))
            self._stop.wait(max(0.0, PROBE.interval_ms / 1000 - (clock.now_ms() - before) / 1000))

    def events(self, kind: str, cluster_id: str) -> list[dict[str, Any]]:
        return [ev for _, _, events in list(self.rounds) for ev in events
                if ev["type"] == kind and ev["cluster_id"] == cluster_id]

    def heartbeats(self, cluster_id: str) -> list[tuple[int, int, dict[str, Any]]]:
        return [(before, after, ev) for before, after, events in list(self.rounds) for ev in events
                if ev["type"] == "broker_heartbeat" and ev["cluster_id"] == cluster_id]

    def alerts(self) -> list[Alert]:
        """What the job's engines make of the recorded events, in the order the probe published
        them, a micro-batch per event (the strictest cut: each event moves the watermark)."""
        events = [event_from_dict(ev) for _, _, round_events in list(self.rounds) for ev in round_events]
        return detect(events, BOOK, batch_size=1)


@contextmanager
def recording(*clusters: tuple[str, KRaftCluster]) -> Iterator[Recorder]:
    recorder = Recorder(Prober([target_of(name, c.bootstrap) for name, c in clusters], PROBE))
    recorder._thread.start()
    try:
        yield recorder
    finally:
        recorder._stop.set()
        recorder._thread.join(timeout=30)


def _start(*clusters: KRaftCluster) -> None:
    with ThreadPoolExecutor(len(clusters)) as pool:
        for started in [pool.submit(c.start) for c in clusters]:
            started.result()


def test_heartbeats_are_on_the_probe_clock_whatever_the_controllers_clock(tmp_path: Path):
    controller = CONTROLLER_ID_BASE
    ahead = KRaftCluster(tmp_path / "ahead", brokers=1, controllers=1, clock_offsets={controller: SKEW_S},
                         session_timeout_ms=SESSION_TIMEOUT_MS)
    behind = KRaftCluster(tmp_path / "behind", brokers=1, controllers=1, clock_offsets={controller: -SKEW_S},
                          session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        _start(ahead, behind)
        with recording(("ahead", ahead), ("behind", behind)) as recorder:
            poll(lambda: all(len(recorder.heartbeats(c.cluster_id)) >= 10 for c in (ahead, behind)), 60,
                 "10 heartbeats of each cluster")
    finally:
        ahead.stop_all()
        behind.stop_all()
    spread = {}
    for cluster in (ahead, behind):
        # Where each heartbeat lies against the probe's round: 0 within it, < 0 before its start.
        spread[cluster.workdir.name] = offsets = [
            min(0, ev["ts"] - before) if ev["ts"] <= after else ev["ts"] - after
            for before, after, ev in recorder.heartbeats(cluster.cluster_id)]
        print(f"{cluster.workdir.name}: heartbeat ts against the probe's round, ms: "
              f"min {min(offsets)} max {max(offsets)} over {len(offsets)}")
    names = {ahead.cluster_id: "ahead", behind.cluster_id: "behind"}
    alerts = [(a.rule, names.get(a.cluster_id or ""), a.broker_id, a.status) for a in recorder.alerts()]
    print("alerts:", alerts)
    for name, offsets in spread.items():
        assert all(-MAX_HEARTBEAT_AGE_MS <= off <= 0 for off in offsets), (name, offsets)
    # The ahead cluster did not move the watermark past the other's events: nothing fires.
    assert alerts == []


def test_the_single_controller_killed_and_back_30_s_later_is_a_new_controller_not_an_alert(tmp_path: Path):
    # Issue 31: 1 controller, 3 brokers; the controller killed (SIGKILL) and started again 30 s
    # later. Meanwhile nobody can fence a broker (the sessions are held); the controller comes back
    # with the same id and a new leader epoch, and Kafka starts every broker's session afresh. In
    # the field some brokers fetched from it only after the probe's first answer naming it; here
    # broker 2 does so for certain: its path to the controller opens a moment after that answer.
    controller = CONTROLLER_ID_BASE
    cluster = KRaftCluster(tmp_path / "restart", brokers=3, controllers=1, partitionable=[2],
                           session_timeout_ms=SESSION_TIMEOUT_MS)
    cid = cluster.cluster_id
    try:
        cluster.start()
        with recording(("restart", cluster)) as recorder:
            poll(lambda: {ev["broker_id"] for _, _, ev in recorder.heartbeats(cid)} == {1, 2, 3}, 60,
                 "heartbeats of every broker")
            cluster.kill_node(controller)
            killed_ms = clock.now_ms()
            poll(lambda: any(ev["controller_id"] == -1 for ev in recorder.events("metadata_response", cid)), 30,
                 "the probe reporting no controller")
            cluster.cut_from_quorum(2)  # while there is no controller to reach: nothing changes for Kafka
            time.sleep(DOWN_S)  # the fault itself: the controller stays down this long
            cluster.restart_node(controller)
            back_ms = poll(lambda: next((ev["ts"] for ev in recorder.events("metadata_response", cid)
                                         if ev["ts"] > killed_ms and ev["controller_id"] == controller), None),
                           60, "the probe reporting the controller back")
            cluster.heal(2)
            poll(lambda: any(ev["ts"] > back_ms and ev["broker_id"] == 2 for _, _, ev in recorder.heartbeats(cid)),
                 30, "broker 2 heard again")
            # The detection's watermark a session past the return.
            poll(lambda: recorder.rounds[-1][0] > back_ms + SESSION_TIMEOUT_MS + LATENESS_MS + 1000, 60,
                 "probe rounds a session past the controller's return")
        fenced = cluster.describe()
    finally:
        cluster.stop_all()
    named = [(ev["controller_id"], ev["controller_epoch"]) for ev in recorder.events("metadata_response", cid)
             if ev["error"] is None and ev["controller_id"] != -1]
    print("controller (id, epoch) reported:", sorted(set(named)))
    assert {c for c, _ in named} == {controller}
    assert len({e for _, e in named}) >= 2  # back in a new leader epoch
    beats = [ev["ts"] - back_ms for _, _, ev in recorder.heartbeats(cid)
             if ev["broker_id"] == 2 and ev["ts"] > killed_ms]
    print(f"broker 2's first heartbeat {beats[0]} ms after the controller's first report")
    # Kafka fenced nobody: every registration the probe saw stayed ONLINE, and all are unfenced.
    assert {ev["state"] for ev in recorder.events("broker_state", cid)} == {"ONLINE"}
    assert fenced == {1: False, 2: False, 3: False}
    alerts = [(a.rule, a.broker_id, a.status, a.starts_at - back_ms) for a in recorder.alerts()]
    print("alerts (starts_at against the controller's first report, ms):", alerts)
    assert [a for a in alerts if a[1] is not None] == []  # nothing about a broker
