"""Heartbeat thinning (streaming.detect.thinning): fewer rows, the same alerts.

The job drops redundant heartbeats per chunk of a Kafka partition before any state; these
tests hold it to its promise that no rule can tell the difference.
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.config import RuleBook
from streaming.detect import detect, redundant_heartbeats
from streaming.records.contract import BrokerHeartbeat, Event, event_from_dict

START_MS = 1_764_000_000_000
GAP_MS = RuleBook().shortest_session_timeout_ms - 1  # what the job passes


def thinned(events: list[Event], chunk: int) -> list[Event]:
    """What the job keeps: thinning runs on each chunk on its own, as on Arrow batches."""
    kept: list[Event] = []
    for start in range(0, len(events), chunk):
        part = events[start:start + chunk]
        drop = redundant_heartbeats(part, GAP_MS)
        kept += [event for i, event in enumerate(part) if i not in drop]
    return kept


def alert_facts(events: list[Event]) -> list[dict]:
    return [alert.to_dict() for alert in detect(events)]


@pytest.fixture(scope="module")
def faulty_fleet() -> list[Event]:
    spec = FleetSpec(clusters=len(FAULT_KINDS), brokers=3, faults=FAULT_KINDS, start_ms=START_MS,
                     duration_ms=900_000, fault_every_ms=60_000, jitter_ms=1500, seed=11)
    return [event_from_dict(ev) for _, ev in Simulation(spec).events()]


@pytest.fixture(scope="module")
def faulty_fleet_alerts(faulty_fleet: list[Event]) -> list[dict]:
    """The unthinned fleet's alerts, the same for every chunk size: detected once."""
    return alert_facts(faulty_fleet)


# 197: a chunk small enough to cut most brokers' runs of heartbeats (with the probe's quorum readings
# and rounds among them, a chunk of 97 held at most two heartbeats of a broker: nothing to drop).
@pytest.mark.parametrize("chunk", [197, 2_000, 1_000_000])
def test_every_fault_raises_the_same_alerts_with_fewer_heartbeats(faulty_fleet: list[Event],
                                                                  faulty_fleet_alerts: list[dict], chunk: int) -> None:
    kept = thinned(faulty_fleet, chunk)
    expected = faulty_fleet_alerts
    assert {a["rule"] for a in expected} >= {"broker.heartbeat_lost", "broker.epoch_regression",
                                             "broker.partitioned", "broker.fenced"}
    assert alert_facts(kept) == expected

    heartbeats = sum(isinstance(e, BrokerHeartbeat) for e in faulty_fleet)
    dropped = len(faulty_fleet) - len(kept)
    assert 0 < dropped < heartbeats
    if chunk >= 2_000:  # a heartbeat every 2 s against a 9 s session timeout: most go
        assert dropped > heartbeats / 2


def hb(ts: int, *, epoch: int = 5, kind: str = "heartbeat", fenced: bool | None = None, broker: int = 1) -> Event:
    return BrokerHeartbeat(ts=ts, source=f"agent-{broker}", cluster_id="c1", broker_id=broker, kind=kind,
                           broker_epoch=epoch, metadata_offset=ts, fenced=fenced, rack=None, endpoints=None)


def test_a_real_gap_keeps_both_its_ends_and_the_last_heartbeat() -> None:
    events = [hb(t) for t in (0, 2_000, 4_000, 6_000, 8_000, 30_000, 32_000, 34_000)]
    assert redundant_heartbeats(events, GAP_MS) == {1, 2, 3, 6}
    assert alert_facts([events[i] for i in (0, 4, 5, 7)]) == alert_facts(events)


def test_kept_heartbeats_are_never_further_apart_than_the_gap() -> None:
    events = [hb(t) for t in range(0, 60_000, 2_000)]
    kept = [e.ts for i, e in enumerate(events) if i not in redundant_heartbeats(events, GAP_MS)]
    assert kept[0] == 0 and kept[-1] == 58_000
    assert max(b - a for a, b in pairwise(kept)) <= GAP_MS


def test_changes_registrations_and_the_last_of_each_run_are_kept_in_event_time() -> None:
    events = [hb(0), hb(2_000), hb(4_000, epoch=4), hb(6_000, epoch=4), hb(7_000, kind="registration", epoch=6),
              hb(8_000), hb(10_000, fenced=True), hb(12_000, fenced=True), hb(14_000, fenced=True),
              hb(13_000, fenced=True), hb(15_000, fenced=True), hb(2_000, broker=2), hb(4_000, broker=2)]
    # Kept: every change, and the last of each run before one (2,000; 6,000, a stale epoch, whose time
    # decides when the regression resolves). Dropped: 12,000, 13,000 and 14,000 (as 10,000: in event
    # time, 13,000 comes between 12,000 and 14,000).
    assert redundant_heartbeats(events, GAP_MS) == {7, 8, 9}
    assert alert_facts([e for i, e in enumerate(events) if i not in {7, 8, 9}]) == alert_facts(events)


def later_than(ts: int) -> Event:
    """A heartbeat of another broker far enough on for every timer of broker 1 to fire."""
    return hb(ts, broker=9)


def test_the_last_of_a_run_of_stale_epoch_heartbeats_is_kept() -> None:
    # A zombie process of broker 1 (epoch 5) heartbeats every 0.5 s beside the live one (epoch 7):
    # the regression resolves 60 s after the zombie's LAST heartbeat, at 61.5 s.
    events = [hb(0, epoch=7), hb(500), hb(1_000), hb(1_500), hb(2_000, epoch=7), later_than(70_000)]
    expected = alert_facts(events)
    assert [(a["status"], a["ends_at"]) for a in expected if a["rule"] == "broker.epoch_regression"] == [
        ("firing", None), ("resolved", 61_500)]
    assert alert_facts(thinned(events, len(events))) == expected


def test_thinning_follows_event_time_not_arrival_order() -> None:
    # Seen in a simulated fleet with 800 ms of jitter: the zombie's heartbeats (epoch 5) arrive
    # just after the live process's (epoch 7) of nearly the same moment. In arrival order the
    # zombie's 46.0 s heartbeat repeats its 44.0 s one; in event time a live heartbeat is between.
    arrival = [42_233, 42_000, 44_075, 44_000, 46_000, 46_164, 48_046]
    events = [hb(ts, epoch=5 if ts % 1_000 == 0 else 7) for ts in arrival] + [later_than(120_000)]
    expected = alert_facts(sorted(events, key=lambda e: e.ts))
    assert [a["ends_at"] for a in expected if a["status"] == "resolved"] == [106_000]
    assert alert_facts(thinned(events, len(events))) == expected
