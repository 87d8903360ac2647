"""The simulator's correlated faults (issue 30.2): labelled groups, fleet-wide racks and releases
only when asked, the plain fleet unchanged (no Spark, no events replayed)."""

from __future__ import annotations

from collections import Counter

from streaming.collect.simulate import FleetSpec, Simulation, parse_faults
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
