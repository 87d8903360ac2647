"""The probe's DescribeQuorum heartbeats against a Kafka 4.4-like fake whose leader's clock is not
the probe's (one clock per probe, SPEC section 3 amended 2026-11-26; the real-Kafka test with
controllers 10 s ahead and behind is test_probe_real_kraft.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from support.probe_doubles import HOST, FakeCluster, FakeKafka, target

from streaming.collect.probe import ProbeOptions, Prober
from streaming.records.contract import BrokerHeartbeat, event_from_dict

T0 = 1_764_000_000_000
ROUND_MS = 5000
OPTIONS = ProbeOptions(timeout_ms=2000, source="probe-test")



def test_heartbeats_only_when_the_fetch_time_moves_and_on_the_probes_clock():
    # The leader's clock runs 7 s ahead of the probe's: its LastFetchTimestamps are on that clock.
    # A heartbeat's ts is the probe's receive time minus the fetch's age on the leader's clock, and
    # whether the fetch moved is decided by comparing the leader's times with each other.
    skew, probe_ms = 7000, {"now": T0}
    leader_now = {"ms": T0 + skew}
    fetch = {1: T0 + skew - 100}

    async def scenario() -> list[tuple[int, list[dict[str, Any]]]]:
        cluster = FakeCluster("hb-cluster", last_fetch=lambda: dict(fetch), leader_clock=lambda: leader_now["ms"])
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        prober = Prober([target("hb", f"{HOST}:{broker.port}")], OPTIONS)
        rounds = []
        try:
            for k in range(3):
                probe_ms["now"] = T0 + k * ROUND_MS
                leader_now["ms"] = probe_ms["now"] + skew
                if k == 2:
                    fetch[1] = leader_now["ms"] - 300
                rounds.append((probe_ms["now"], [ev for ev in await prober.probe_round_async(probe_ms["now"])
                                                 if ev["type"] == "broker_heartbeat"]))
        finally:
            await broker.stop()
        return rounds

    (at0, first), (_, same), (at2, moved) = asyncio.run(scenario())
    assert [(ev["broker_id"], ev["metadata_offset"]) for ev in first] == [(1, 100)]
    # Received within the exchange's timeout of the round's start, 100 ms after the fetch.
    assert at0 - 100 <= first[0]["ts"] <= at0 - 100 + OPTIONS.timeout_ms
    assert same == []
    assert [ev["broker_id"] for ev in moved] == [1]
    assert at2 - 300 <= moved[0]["ts"] <= at2 - 300 + OPTIONS.timeout_ms
    assert isinstance(event_from_dict(moved[0]), BrokerHeartbeat)


def test_no_heartbeat_without_the_leaders_own_time():
    # A DescribeQuorum answer whose leader is not listed with a time (no reference on its clock):
    # its LastFetchTimestamps are never copied into a ts.
    async def scenario() -> list[dict[str, Any]]:
        cluster = FakeCluster("hb-cluster", last_fetch=lambda: {1: T0 - 100}, leader_clock=lambda: -1)
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        try:
            return await Prober([target("hb", f"{HOST}:{broker.port}")], OPTIONS).probe_round_async(T0)
        finally:
            await broker.stop()

    events = asyncio.run(scenario())
    assert [ev["controller_id"] for ev in events if ev["type"] == "metadata_response"] == [3001, 3001]
    assert [ev for ev in events if ev["type"] == "broker_heartbeat"] == []
