"""The probe's fast quorum reading (issue 44; streaming/collect/probe/quorum.py) against a Kafka 4.4-like
fake broker (tests/support/probe_doubles.py) whose leader's clock is not the probe's, and its pure parts:
what a reading says, one time per fetch whichever reading gives it, and when a reading follows another.
The real thing on real Kafka 4.4: tests/collect/test_quorum_reading_real.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from support.probe_doubles import HOST, Blackhole, FakeCluster, FakeKafka, refused_port, target

from streaming.collect.probe import ProbeOptions, Prober
from streaming.collect.probe.exchange import Answer, Quorum
from streaming.collect.probe.kraft_readings import LastReadings, heartbeats
from streaming.collect.probe.prober import Slots
from streaming.collect.probe.quorum import follow_up_in, reading_of
from streaming.records.contract import QuorumReading, event_from_dict

T0 = 1_764_000_000_000
SKEW_MS = 7000  # the leader's clock runs this far ahead of the probe's


def _partition(leader_now: int, voters: dict[int, int], observers: dict[int, int], epoch: int = 4) -> dict[str, Any]:
    def entries(fetches: dict[int, int]) -> list[dict[str, Any]]:
        return [{"ReplicaId": node, "LastFetchTimestamp": ts} for node, ts in fetches.items()]
    return {"LeaderId": 3001, "LeaderEpoch": epoch, "CurrentVoters": entries({3001: leader_now, **voters}),
            "Observers": entries(observers)}


def test_a_reading_says_each_brokers_fetch_age_on_the_leaders_clock_and_its_registration():
    leader_now = T0 + SKEW_MS
    quorum = _partition(leader_now, {3000: leader_now - 50, 3002: -1},
                        {1: leader_now - 120, 2: -1, 3: leader_now - 3000})
    event = reading_of(quorum, {1: False, 2: False, 3: True, 4: True}, frozenset(), LastReadings(),
                       ts=T0, source="probe-a", cluster_id="C", target="pay")
    reading = event_from_dict(event)
    assert isinstance(reading, QuorumReading)
    assert (reading.ts, reading.controller_id, reading.controller_epoch) == (T0, 3001, 4)
    # Controllers (voters that are no broker) are left out; a broker the leader has no fetch of in its
    # term (Kafka's -1) and a registered broker the quorum does not list have no age.
    assert reading.fetches == ((1, 120, False), (2, None, False), (3, 3000, True), (4, None, True))


def test_in_the_combined_layout_voters_are_the_brokers_and_without_registrations_no_flag():
    leader_now = 50_000
    quorum = _partition(leader_now, {1: leader_now - 80, 2: leader_now - 2600}, {})
    quorum["LeaderId"] = 3  # a combined node leads: it lists itself with its own now
    quorum["CurrentVoters"].append({"ReplicaId": 3, "LastFetchTimestamp": leader_now})
    quorum["CurrentVoters"] = [v for v in quorum["CurrentVoters"] if v["ReplicaId"] != 3001]
    event = reading_of(quorum, None, frozenset({1, 2, 3}), LastReadings(), ts=9, source="p", cluster_id="C",
                       target="pay")
    assert event is not None and event["fetches"] == [[1, 80, None], [2, 2600, None], [3, 0, None]]


def test_no_reading_without_a_leader_or_its_own_time():
    assert reading_of(_partition(5000, {}, {1: 4900}) | {"LeaderId": -1}, None, frozenset(), LastReadings(),
                      ts=1, source="p", cluster_id="C", target="pay") is None
    no_time = _partition(5000, {}, {1: 4900})
    no_time["CurrentVoters"] = []
    assert reading_of(no_time, None, frozenset(), LastReadings(), ts=1, source="p", cluster_id="C",
                      target="pay") is None


def test_one_fetch_has_one_time_whichever_reading_gives_it():
    # A round's heartbeat dated the fetch first; a reading 400 ms later on the probe's clock (its answer
    # received 30 ms later than the leader's now: another delay) reports the age from that same time,
    # so detection never takes the same fetch, dated twice, for a newer heartbeat.
    seen, leader_now = LastReadings(), 700_000
    boot = Answer(endpoint="b1:9092", expected=None, cluster_id="C", brokers=(),
                  quorum=Quorum(3001, {3001: (leader_now, 9)}, {1: (leader_now - 100, 9)}, leader_epoch=4))
    (heartbeat,) = heartbeats(boot, [boot], seen, "p", lambda _: 2_000_000)
    assert heartbeat["ts"] == 2_000_000 - 100
    later = _partition(leader_now + 400, {}, {1: leader_now - 100})
    event = reading_of(later, None, frozenset(), seen, ts=2_000_430, source="p", cluster_id="C", target="pay")
    assert event is not None and event["fetches"] == [[1, 530, None]]
    assert event["ts"] - event["fetches"][0][1] == heartbeat["ts"]


def test_a_fetch_the_leader_held_is_aged_from_when_it_came_not_from_its_answer():
    # Kafka 4.4's leader stamps LastFetchTimestamp again when it answers a held fetch (up to 500 ms after it
    # came); LastCaughtUpTimestamp keeps when a caught-up fetch came. A broker that froze while its fetch was
    # held last asked 2,450 ms ago, though its answer went out 2,000 ms ago (measured on real Kafka: the answer
    # 14-396 ms after a SIGSTOP, the arrival 89-471 ms before it).
    leader_now = T0 + SKEW_MS

    def entry(node: int, last: int, caught_up: int) -> dict[str, Any]:
        return {"ReplicaId": node, "LastFetchTimestamp": leader_now - last, "LastCaughtUpTimestamp": caught_up}

    quorum = _partition(leader_now, {}, {})
    quorum["Observers"] = [
        entry(1, 2000, leader_now - 2450),  # frozen while its fetch was held
        entry(2, 120, leader_now - 120),  # healthy: its fetch came 120 ms ago, held since
        entry(3, 80, leader_now - 9000),  # catching up: it fetches, but was last caught up long ago
        entry(4, 300, -1),  # never caught up in this leader's term
        entry(5, 300, leader_now - 200)]  # no caught-up time after the last stamp: the stamp is all there is
    event = reading_of(quorum, None, frozenset(), LastReadings(), ts=T0, source="p", cluster_id="C", target="pay")
    assert event is not None
    assert event["fetches"] == [[1, 2450, None], [2, 120, None], [3, 80, None], [4, 300, None], [5, 300, None]]
    # Held, then answered: the reading after the answer (100 ms later) ages the same fetch on from when it came.
    came, seen = leader_now - 300, LastReadings()
    held = _partition(leader_now, {}, {})
    held["Observers"] = [entry(1, 300, came)]
    answered = _partition(leader_now + 100, {}, {})
    answered["Observers"] = [entry(1, -50, came)]  # answered 50 ms after this reading's leader_now
    first = reading_of(held, None, frozenset(), seen, ts=T0, source="p", cluster_id="C", target="pay")
    later = reading_of(answered, None, frozenset(), seen, ts=T0 + 100, source="p", cluster_id="C", target="pay")
    assert first is not None and later is not None
    assert (first["fetches"], later["fetches"]) == ([[1, 300, None]], [[1, 400, None]])


def test_a_reading_that_shows_a_stall_coming_is_followed_when_it_comes():
    assert follow_up_in({"fetches": [[1, 100, False], [3, 1600, False]]}, 2500, 1000) == 0.905
    assert follow_up_in({"fetches": [[3, 1400, False]]}, 2500, 1000) is None  # the next reading shows it
    assert follow_up_in({"fetches": [[3, 2600, False]]}, 2500, 1000) is None  # this one did
    assert follow_up_in({"fetches": [[3, 1600, True]]}, 2500, 1000) is None  # fenced: no stall to show
    assert follow_up_in({"fetches": [[3, 1600, False]]}, 0, 1000) is None  # the rule is off


def test_a_stall_is_shown_by_the_reading_that_follows_when_it_happens_not_an_interval_later():
    # Broker 2 last fetched 1,800 ms before the first reading: its fetch becomes 2,500 ms old 700 ms later,
    # 300 ms before the next regular reading (which would show it about 2,800 ms old). The follow-up shows it
    # then: not a few ms short (which would cost a whole interval), and not an interval later.
    def leader_now() -> int:
        return int(time.time() * 1000) + SKEW_MS

    stopped = {2: leader_now()}
    events: list[dict[str, Any]] = []

    async def scenario() -> None:
        cluster = FakeCluster("Cf", leader_clock=leader_now, last_fetch=lambda: {1: leader_now() - 100, **stopped})
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False},
                           {"node_id": 2, "port": broker.port, "fenced": False}]
        prober = Prober([target("f", f"{HOST}:{broker.port}", stall_after_ms=2500)],
                        ProbeOptions(timeout_ms=1000, source="p", quorum_interval_ms=1000))
        await prober.probe_round_async()
        stopped[2] = leader_now() - 1800  # from the first reading on (the round above took its own time)
        slots, done = Slots.of(prober.targets, prober.options), asyncio.Event()

        async def emit(batch: list[dict[str, Any]]) -> None:
            events.extend(batch)
            if len(events) == 2:
                done.set()

        try:
            await asyncio.wait_for(prober.quorum.run(emit, done, slots), 10)
        finally:
            slots.close()
            await broker.stop()

    asyncio.run(scenario())
    ages = [dict((node, age) for node, age, _ in event["fetches"])[2] for event in events]
    assert ages[0] < 2500 <= ages[1] < 2500 + 250


def test_the_reader_keeps_one_connection_and_moves_to_the_next_address_when_one_fails():
    now = {"ms": int(time.time() * 1000) + SKEW_MS}

    async def scenario() -> tuple[list[dict[str, Any]], FakeKafka]:
        cluster = FakeCluster("Cq", last_fetch=lambda: {1: now["ms"] - 200, 2: now["ms"] - 2700},
                              leader_clock=lambda: now["ms"])
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False},
                           {"node_id": 2, "port": refused_port(), "fenced": False}]
        # The first bootstrap address refuses: the round answers through the second, the readings too.
        prober = Prober([target("q", f"{HOST}:{refused_port()}", f"{HOST}:{broker.port}")],
                        ProbeOptions(timeout_ms=1000, source="p", quorum_interval_ms=1000))
        await prober.probe_round_async()
        slots = Slots.of(prober.targets, prober.options)
        events = [await prober.quorum.read(prober.targets[0], slots) for _ in range(3)]
        slots.close()
        for link in prober.quorum.links.values():
            link.close()
        await broker.stop()
        return [e for e in events if e is not None], broker

    events, broker = asyncio.run(scenario())
    assert len(events) == 3 and {e["cluster_id"] for e in events} == {"Cq"}
    assert [(node, age is not None and abs(age - expected) < 500, fenced) for node, age, fenced in events[-1]["fetches"]
            for expected in [{1: 200, 2: 2700}[node]]] == [(1, True, False), (2, True, False)]
    readings_on = [c for c in broker.connections if not any(api == "Metadata" for api, _ in c)]
    assert len(readings_on) == 1 and readings_on[0].count(("DescribeQuorum", 2)) == 3  # one connection kept


def test_a_reading_that_fails_is_followed_at_once_through_the_next_address():
    # The address the readings use stops answering (a broker cut off from its controllers times out the
    # forwarded DescribeQuorum): the next address is read at once, not a tick later, when a stall it shows
    # would come an interval late.
    hole = Blackhole()

    async def scenario() -> tuple[float, list[dict[str, Any]]]:
        cluster = FakeCluster("Cf", last_fetch=lambda: {1: int(time.time() * 1000) - 100})
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        prober = Prober([target("f", f"{HOST}:{broker.port}", f"{HOST}:{hole.port}")],
                        ProbeOptions(timeout_ms=1000, source="p", quorum_interval_ms=1000))
        await prober.probe_round_async()  # the cluster's id, through the first address
        prober.quorum.links["f"].index = 1  # the readings go through the black hole first
        loop, done, emitted = asyncio.get_running_loop(), asyncio.Event(), []

        async def emit(events: list[dict[str, Any]]) -> None:
            emitted.extend(events)
            done.set()

        slots = Slots.of(prober.targets, prober.options)
        began = loop.time()
        await asyncio.wait_for(prober.quorum.run(emit, done, slots), 10)
        took = loop.time() - began
        slots.close()
        await broker.stop()
        return took, emitted

    try:
        took, emitted = asyncio.run(scenario())
    finally:
        hole.close()
    assert [e["cluster_id"] for e in emitted] == ["Cf"]
    # The black hole's reading took its bound (1 s); the next address answered right after, not at 2 s.
    assert 1.0 <= took < 1.5


def test_a_rounds_slow_exchanges_never_delay_a_reading():
    # Two of the cluster's advertised brokers are black holes: each of the round's exchanges with them
    # holds the target's one slot for the whole timeout. The reading, on its own connection, is not queued
    # behind them.
    holes = [Blackhole(), Blackhole()]

    async def scenario() -> tuple[float, dict[str, Any] | None, bool]:
        cluster = FakeCluster("Cs", last_fetch=lambda: {1: int(time.time() * 1000) - 100})
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False},
                           *({"node_id": 2 + i, "port": hole.port, "fenced": False} for i, hole in enumerate(holes))]
        prober = Prober([target("s", f"{HOST}:{broker.port}")],
                        ProbeOptions(timeout_ms=1500, source="p", target_concurrency=1, quorum_interval_ms=1000))
        loop = asyncio.get_running_loop()
        slots = Slots.of(prober.targets, prober.options)
        await prober.probe_target(prober.targets[0], int(time.time() * 1000), loop.time(), slots)  # learns them
        await prober.quorum.read(prober.targets[0], slots)  # its connection opened
        served = len(broker.connections)
        round_ = loop.create_task(prober.probe_target(prober.targets[0], int(time.time() * 1000), loop.time(),
                                                      slots))
        # Until the round's bootstrap and its exchange with broker 1 are done: its black holes hold the slot.
        deadline = loop.time() + 10
        while len(broker.connections) < served + 2 and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert slots.per_target["s"].locked()
        begun = loop.time()
        event = await prober.quorum.read(prober.targets[0], slots)
        took = loop.time() - begun
        busy = not round_.done()
        await round_
        slots.close()
        for link in prober.quorum.links.values():
            link.close()
        await broker.stop()
        return took, event, busy

    try:
        took, event, busy = asyncio.run(scenario())
    finally:
        for hole in holes:
            hole.close()
    assert busy  # the round was still waiting on its black holes
    assert event is not None and took < 0.5  # a round trip on loopback, not a place in the round's queue
