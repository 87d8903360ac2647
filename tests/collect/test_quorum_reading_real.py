"""Before Kafka knows (issue 44), on a real Apache Kafka 4.4 cluster with Kafka's defaults (a 9 s broker
session, heartbeats every 2 s; 3 controllers, 2 brokers) watched by the real probe at its defaults (rounds
every 5 s, a quorum reading every second), its events run through the detection engines the Spark job
runs (`streaming.detect.detect`, one micro-batch per event in the order the probe published them: the
strictest cut), with fleetwatch's default rules.

Measured on main 69ef28b: a broker frozen with SIGSTOP was `broker.heartbeat_lost` 13.9 and 16.4 s after
the freeze, Kafka fenced it after 8.1 s, and nothing warned before. Now the quorum reading shows each
broker's fetch age every second: `broker.stalled` (a warning) fires from the reading that shows the fetch
2.5 s old, and `broker.heartbeat_lost` with the reading that shows Kafka fenced it. And none of what Kafka
does on purpose warns: a JVM pause under the threshold, a controller failover, a restart of the active
controller, a rolling restart of every broker (each a controlled shutdown).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streaming.collect.probe import ProbeOptions, Prober
from streaming.config import FleetwatchConfig
from streaming.detect import detect
from streaming.records.alert import Alert
from streaming.records.contract import event_from_dict
from streaming.workshop.kraft import KRaftCluster, target_of
from streaming.workshop.polling import poll

pytestmark = [pytest.mark.real_kafka, pytest.mark.integration]

SESSION_TIMEOUT_MS, HEARTBEAT_INTERVAL_MS = 9000, 2000  # Kafka's defaults
BOOK = FleetwatchConfig.model_validate({}).rule_book()  # fleetwatch's defaults: Kafka's session, stall 2500
DOWN_S = 10  # a broker of the rolling restart is down longer than its 9 s session
BROKER_RULES = ("broker.stalled", "broker.heartbeat_lost", "broker.heartbeat_late", "broker.partitioned",
                "broker.fenced")


class LiveProbe:
    """`fleetwatch probe`'s live loop at its defaults in a thread, its events kept in the order it
    published them (the bus's order)."""

    def __init__(self, cluster: KRaftCluster) -> None:
        self.prober = Prober([target_of("stalls", cluster.bootstrap)], ProbeOptions(source="probe-stalls"))
        self.events: list[dict[str, Any]] = []
        self.published_at: list[float] = []  # monotonic, of each of `events`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), name="live-probe", daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await self.prober.run(self._publish, stop=self._stop)

    def _publish(self, events: list[dict[str, Any]]) -> None:
        self.published_at += [time.monotonic()] * len(events)
        self.events += events

    def start(self) -> LiveProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def readings(self, since_ms: float = 0) -> list[dict[str, Any]]:
        return [ev for ev in list(self.events) if ev["type"] == "quorum_reading" and ev["ts"] >= since_ms]

    def alerts(self) -> list[Alert]:
        return detect([event_from_dict(ev) for ev in list(self.events)], BOOK, batch_size=1)

    def broker_alerts(self, since_ms: float, rule: str | None = None, broker: int | None = None) -> list[Alert]:
        return [a for a in self.alerts() if a.rule in BROKER_RULES and (rule is None or a.rule == rule)
                and (broker is None or a.broker_id == broker) and a.event_ms >= since_ms]

    def not_read_through(self, cluster: KRaftCluster) -> int:
        """A broker the readings do not go through now (a frozen one they go through gives no reading)."""
        link = self.prober.quorum.links["stalls"]
        through = cluster.brokers[link.index or 0].node_id
        return next(b.node_id for b in cluster.brokers if b.node_id != through)

    def read_past(self, wall_ms: float, timeout_s: float = 60) -> None:
        """Wait until a reading later than `wall_ms` was published (everything before it was read)."""
        poll(lambda: any(r["ts"] > wall_ms for r in self.readings()), timeout_s, f"a reading after {wall_ms}")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KRaftCluster]:
    cluster = KRaftCluster(Path(tmp_path_factory.mktemp("stalls")), brokers=2, controllers=3, partitionable=[2],
                           session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture(scope="module")
def probe(kafka: KRaftCluster) -> Iterator[LiveProbe]:
    live = LiveProbe(kafka).start()
    try:
        poll(lambda: len(live.readings()) >= 3, 60, "three quorum readings")
        yield live
    finally:
        live.stop()


def _fetch(reading: dict[str, Any], broker: int) -> list[Any]:
    return next(f for f in reading["fetches"] if f[0] == broker)


def test_the_probe_reads_every_brokers_fetch_age_every_second(kafka: KRaftCluster, probe: LiveProbe):
    since = time.time() * 1000
    probe.read_past(since + 5000)
    readings = probe.readings(since)
    assert len(readings) >= 4  # one a second, apart from the rounds (one every 5 s)
    leader = kafka.quorum_leader()
    for reading in readings:
        assert reading["cluster_id"] == kafka.cluster_id and reading["target"] == "stalls"
        assert [f[0] for f in reading["fetches"]] == [1, 2]  # the brokers, not the controllers (voters)
        # A healthy broker fetches at least every 500 ms: its age is well under the 2.5 s threshold.
        assert all(age is not None and 0 <= age < 2500 and fenced is False for _, age, fenced in reading["fetches"])
    assert readings[-1]["controller_id"] == leader
    # On the probe's clock: its receive time, not the controller's.
    assert all(abs(r["ts"] - since) < 60_000 for r in readings)


def test_a_frozen_broker_is_warned_before_kafka_fences_it_and_paged_with_the_fence(kafka: KRaftCluster,
                                                                                   probe: LiveProbe):
    frozen_ms = time.time() * 1000
    kafka.freeze(2)
    try:
        fenced_ms = kafka.wait_fenced(2, 60) * 1000  # Kafka's own controller fences it
        probe.read_past(fenced_ms)
        poll(lambda: any(_fetch(r, 2)[2] for r in probe.readings(frozen_ms)), 30, "a reading of broker 2 fenced")
    finally:
        thawed_ms = time.time() * 1000
        kafka.thaw(2)
    kafka.wait_unfenced([2], 60)
    probe.read_past(time.time() * 1000 + 1000)
    fenced_reading = next(r for r in probe.readings(frozen_ms) if _fetch(r, 2)[2])
    stalled = probe.broker_alerts(frozen_ms, "broker.stalled", 2)
    lost = probe.broker_alerts(frozen_ms, "broker.heartbeat_lost", 2)
    shown = [(a.rule, a.status, a.starts_at - frozen_ms, (a.ends_at or 0) - frozen_ms) for a in stalled + lost]
    trace = [(r["ts"] - frozen_ms, _fetch(r, 2)) for r in probe.readings(frozen_ms)]
    assert [a.status for a in stalled] == ["firing", "resolved"], (shown, trace)
    assert [a.status for a in lost] == ["firing", "resolved"], (shown, trace)
    # Every reading dates the broker's last fetch when it came, before the freeze, not when the controller
    # answered it: a fetch held for a record stamped again at its answer, up to 500 ms into the freeze (7 of
    # 8 freezes, by 14-396 ms). The readings' ts are the probe's receive times, a few ms after the answers.
    frozen = [r for r in probe.readings(frozen_ms) if r["ts"] < thawed_ms]
    assert all(r["ts"] - _fetch(r, 2)[1] <= frozen_ms + 50 for r in frozen), trace
    # The warning: from the reading that showed the fetch 2.5 s old, before Kafka fenced the broker.
    assert stalled[0].starts_at < fenced_reading["ts"]
    assert stalled[0].details["fetch_age_ms"] >= 2500 and stalled[0].starts_at <= frozen_ms + 2500 + 50
    # The page: with the reading that showed the fence at the latest, the stall's incident escalated.
    assert lost[0].starts_at <= fenced_reading["ts"]
    assert lost[0].details["escalates"] == stalled[0].alert_id
    # Both end at its first fetch after the thaw.
    assert stalled[1].ends_at == lost[1].ends_at
    assert probe.broker_alerts(frozen_ms, broker=1) == []


def test_a_broker_cut_off_from_the_controllers_is_warned_and_paged_likewise(kafka: KRaftCluster, probe: LiveProbe):
    cut_ms = time.time() * 1000
    kafka.cut_from_quorum(2)  # it still answers clients: readings through it time out, the next address answers
    try:
        fenced_ms = kafka.wait_fenced(2, 60) * 1000
        probe.read_past(fenced_ms)
        poll(lambda: any(_fetch(r, 2)[2] for r in probe.readings(cut_ms)), 30, "a reading of broker 2 fenced")
    finally:
        kafka.heal(2)
    kafka.wait_unfenced([2], 60)
    probe.read_past(time.time() * 1000 + 1000)
    fenced_reading = next(r for r in probe.readings(cut_ms) if _fetch(r, 2)[2])
    stalled = probe.broker_alerts(cut_ms, "broker.stalled", 2)
    lost = probe.broker_alerts(cut_ms, "broker.heartbeat_lost", 2)
    assert [a.status for a in stalled] == ["firing", "resolved"] and [a.status for a in lost] == ["firing", "resolved"]
    assert stalled[0].starts_at < fenced_reading["ts"] and lost[0].starts_at <= fenced_reading["ts"]
    assert lost[0].details["escalates"] == stalled[0].alert_id


def test_a_round_publishes_each_answer_as_it_comes_a_frozen_brokers_timeout_holds_none_back(kafka: KRaftCluster,
                                                                                          probe: LiveProbe):
    # Issue 45.3: the probe published a target's events when its round ended, so one exchange that timed
    # out (3 s) held back every answer of its cluster, during the very fault it shows.
    frozen = probe.not_read_through(kafka)
    other = next(b.node_id for b in kafka.brokers if b.node_id != frozen)
    since = time.time() * 1000

    def answer_of(node: int, failed: bool) -> int | None:
        """The index of a round's answer from `node` after `since`, one that failed or one that did not."""
        return next((i for i, ev in reversed(list(enumerate(probe.events)))
                     if ev["type"] == "metadata_response" and ev["ts"] >= since
                     and (ev["expected"] or {}).get("node_id") == node and (ev["error"] is not None) == failed), None)

    kafka.freeze(frozen)
    try:
        timed_out = poll(lambda: answer_of(frozen, failed=True), 30, f"an exchange with frozen broker {frozen} failing")
    finally:
        kafka.thaw(frozen)
    kafka.wait_unfenced([frozen], 60)
    failure = probe.events[timed_out]
    # The answer of the other broker in the same round (stamped on the same round's clock, before the failure).
    answered = next(i for i, ev in enumerate(probe.events)
                    if ev["type"] == "metadata_response" and (ev["expected"] or {}).get("node_id") == other
                    and ev["error"] is None and 0 <= failure["ts"] - ev["ts"] < probe.prober.options.timeout_ms + 1000)
    assert failure["error"] == "TIMEOUT", failure
    # Published as it came, before the failure was (before: both at once, when the round ended).
    assert probe.published_at[answered] < probe.published_at[timed_out], (probe.events[answered], failure)
    ended = next(i for i, ev in enumerate(probe.events)
                 if i > timed_out and ev["type"] == "collector_round" and ev["ts"] >= failure["ts"])
    assert probe.published_at[ended] >= probe.published_at[timed_out]  # the round's end still comes last


def test_a_jvm_pause_under_the_threshold_warns_nothing(kafka: KRaftCluster, probe: LiveProbe):
    broker = probe.not_read_through(kafka)
    last = probe.readings()[-1]["ts"]
    poll(lambda: probe.readings(last + 1), 10, "the next reading", interval_s=0.005)
    paused_ms = time.time() * 1000
    kafka.freeze(broker)  # just after a reading: the next one comes about a second into the pause
    time.sleep(1.5)  # the fault itself: a 1.5 s pause, under the 2.5 s threshold with a fetch wait to spare
    kafka.thaw(broker)
    probe.read_past(time.time() * 1000 + 3000)
    worst = max(_fetch(r, broker)[1] for r in probe.readings(paused_ms))
    trace = [(r["ts"] - paused_ms, r["fetches"]) for r in probe.readings(paused_ms - 2000)]
    assert 500 <= worst < 2500, (broker, trace)  # the readings saw the pause, and it stayed under the threshold
    assert probe.broker_alerts(paused_ms) == []


def test_a_controller_failover_and_a_restart_of_the_active_controller_warn_nothing(kafka: KRaftCluster,
                                                                                   probe: LiveProbe):
    since = time.time() * 1000
    initial = probe.readings()[-1]["controller_epoch"]
    first = kafka.quorum_leader()
    kafka.kill_node(first)  # a failover
    second = poll(lambda: max(kafka.quorum_leader(), 0), 60, "a new active controller")
    kafka.restart_node(first)
    probe.read_past(time.time() * 1000 + 2000)
    kafka.kill_node(second)  # the active controller restarted: killed, and started again at once
    kafka.restart_node(second)
    poll(lambda: max(kafka.quorum_leader(), 0), 60, "an active controller again")
    # A session after the last move: any deadline it overran has fallen due by then.
    probe.read_past(time.time() * 1000 + SESSION_TIMEOUT_MS + 1000)
    terms = {r["controller_epoch"] for r in probe.readings(since)} - {initial}
    assert len(terms) >= 2 and min(terms) > initial  # the readings saw both new terms
    assert probe.broker_alerts(since) == []


def test_a_rolling_restart_of_every_broker_warns_nothing(kafka: KRaftCluster, probe: LiveProbe):
    since = time.time() * 1000
    for broker in (1, 2):
        kafka.stop_node(broker)  # SIGTERM: a controlled shutdown
        time.sleep(DOWN_S)  # the fault itself: down longer than a broker session (a restart that recovers logs)
        kafka.restart_node(broker, 120)
        kafka.wait_unfenced([1, 2], 120)
    probe.read_past(time.time() * 1000 + 2000)
    trace = [(r["ts"] - since, r["controller_id"], r["fetches"]) for r in probe.readings(since)]
    for broker in (1, 2):
        # Read fenced while it still fetched (its controlled shutdown done), then fenced and silent.
        assert any(_fetch(r, broker)[2] and (_fetch(r, broker)[1] or 0) < 2500 for r in probe.readings(since)), (
            broker, trace)
        assert any(_fetch(r, broker)[2] and (_fetch(r, broker)[1] or 0) >= SESSION_TIMEOUT_MS
                   for r in probe.readings(since)), (broker, trace)
    assert probe.broker_alerts(since) == []
    # Read as SPEC's heartbeat_lost alone reads it (nothing stopped: `stall_after_ms` 0), the same events page
    # for each broker: down longer than a session.
    spec = FleetwatchConfig.model_validate({"rules": {"stall_after_ms": 0}}).rule_book()
    paged = {a.broker_id for a in detect([event_from_dict(ev) for ev in list(probe.events)], spec, batch_size=1)
             if a.rule == "broker.heartbeat_lost" and a.starts_at >= since}
    assert paged == {1, 2}
