"""The simulator's correlated faults (issue 30.2): labelled groups, fleet-wide racks and releases
only when asked, the plain fleet unchanged (no Spark, no events replayed)."""

from __future__ import annotations

import json
from collections import Counter

from support.reference import reference_alerts

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation, parse_faults
from streaming.detect import Domain

START = 1_764_000_000_000


def _sim(correlated: tuple[str, ...]) -> Simulation:
    return Simulation(FleetSpec(clusters=40, brokers=4, faults=parse_faults("heartbeat_lost,fenced"),
                                start_ms=START, duration_ms=20 * 60_000, seed=1, correlated=correlated))


def test_correlated_faults_carry_their_group_and_share_its_domain():
    sim = _sim(("rack", "release"))
    groups = Counter(f.group for f in sim.faults if f.group)
    assert groups == {"rack:r000-4": 4, "release:4.4.1": 3}
    places = sim.places()
    for fault in sim.faults:
        if fault.group:
            kind, value = fault.group.split(":")
            place = places[fault.cluster_id]
            domains = place.brokers[fault.broker_id].domains() | place.tag_domains()
            assert Domain(kind, value) in domains or Domain("tag", f"release={value}") in domains
            assert fault.as_dict()["group"] == fault.group
    # No regular fault of a member's cluster overlaps the correlated one.
    for fault in sim.faults:
        if fault.group:
            others = [f for f in sim.faults if f.cluster_id == fault.cluster_id and f is not fault]
            assert all(f.start_ms > fault.end_ms or f.end_ms < fault.start_ms for f in others)


def test_the_plain_fleet_is_unchanged():
    sim = _sim(())
    assert not any(f.group for f in sim.faults) and "group" not in sim.faults[0].as_dict()
    assert {b.rack for p in sim.places().values() for b in p.brokers.values()} == {"a", "b", "c"}
    assert all(not p.tags for p in sim.places().values())


def test_a_broker_two_correlated_faults_hit_is_never_taken_for_a_flapping_one():
    """16 clusters (four rack rows): c0004 runs the bad release and sits in the failing rack's row.
    Its broker's crash by the rack (90 s) and by the release must not fall within one flap window
    (four state changes in 300 s: a broker.flapping neither fault is), and the rollout keeps its
    15 s step, so the release is still one incident. Every alert of the oracle has its fault."""
    sim = Simulation(FleetSpec(clusters=16, brokers=3, faults=FAULT_KINDS, start_ms=START, duration_ms=20 * 60_000,
                               seed=1, correlated=("rack", "release")))
    release = [f for f in sim.faults if f.group == "release:4.4.1"]
    rack = {f.target: f for f in sim.faults if f.group and f.group.startswith("rack:")}
    assert [f.target for f in release] == ["c0004", "c0013"] and "c0004" in rack
    assert [f.start_ms - release[0].start_ms for f in release] == [0, 15_000]
    assert release[0].start_ms - rack["c0004"].end_ms >= 300_000
    raised = [a for a in reference_alerts([json.dumps(ev) for _, ev in sim.events()]) if a["status"] == "firing"]
    assert [a for a in raised if sim.cause(a) is None] == []
    assert "broker.flapping" not in {a["rule"] for a in raised if sim.cause(a) in (*release, *rack.values())}
