"""Blast radius (issue 30): the layout rules on their scenarios, and the impact a broker incident carries
(streaming/detect/partitions.py; README "Blast radius")."""

from __future__ import annotations

import pytest
from support.reference import as_lines, reference_alerts
from support.rule_cases import partitions
from support.rule_events import (
    FENCED_GRACE,
    HB_LOST,
    SESSION,
    C,
    hb,
    later,
    layout,
    lines,
    past,
    run,
    same_lines,
    t,
    table,
    table_ids,
)

SCENARIOS = table(partitions.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    same_lines(lines(scenario.events, scenario.book), scenario.expected)


# Three brokers, replication 3, min.insync.replicas 2: broker 1 leads p0-p2, broker 2 p3-p4, broker 3 p5.
def _parts(isr: list[int], leaders: list[int]) -> list[tuple[int, int, list[int], list[int]]]:
    return [(p, leader, [1, 2, 3], isr) for p, leader in enumerate(leaders)]


HEALTHY = {"orders": _parts([1, 2, 3], [1, 1, 1, 2, 2, 3])}
ONE_FENCED = {"orders": _parts([2, 3], [2, 3, 2, 2, 2, 3])}  # Kafka moved broker 1's leaderships away
MIN2 = {"orders": 2}


def _heartbeats(broker: int, until: float) -> list:
    return [hb(t(s / 2), broker) for s in range(0, int(until * 2) + 1)]


def _firing(alerts: list[dict], broker: int) -> dict:
    return next(a for a in alerts if a["rule"] == HB_LOST and a["broker_id"] == broker and a["status"] == "firing")


def _two_brokers_stop() -> list:
    # Broker 1 stops at 10 s; broker 2 at 30 s; broker 3 stays. Layouts every 5 s; from 15 s on Kafka
    # has fenced broker 1 (its leaderships moved, out of every ISR).
    events = [*_heartbeats(1, 10), *_heartbeats(2, 30), *_heartbeats(3, 70)]
    events += [layout(s, HEALTHY if s < 15 else ONE_FENCED, MIN2) for s in range(0, 70, 5)]
    return [*sorted(events, key=lambda e: e.ts), later(past(t(70)))]


def test_the_reference_detector_agrees_on_the_impact_byte_for_byte():
    events = _two_brokers_stop()
    assert reference_alerts(as_lines(events)) == run(events)


def test_a_broker_incident_carries_its_blast_radius():
    alerts = run(_two_brokers_stop())
    first, second = _firing(alerts, 1), _firing(alerts, 2)
    assert first["starts_at"] == t(10) + SESSION and second["starts_at"] == t(30) + SESSION
    assert first["details"]["impact"] == {
        "layout_at": t(15), "led_as_of": t(10), "complete": True,
        "partitions_led": 3, "replicas_held": 6, "partitions_offline": 0, "partitions_under_min_isr": 0,
        "top_topics": [{"topic": "orders", "led": 3, "replicas": 6, "offline": 0, "under_min_isr": 0}]}
    impact = second["details"]["impact"]
    # Broker 2 leads 4 now; broker 1 out of the ISRs, broker 2 taken out: broker 3 alone in sync.
    assert (impact["partitions_led"], impact["partitions_under_min_isr"], impact["partitions_offline"]) == (4, 6, 0)
    # The resolved line carries what the firing one said.
    resolved = [a for a in alerts if a["alert_id"] == first["alert_id"] and a["status"] == "resolved"]
    assert all(a["details"] == first["details"] for a in resolved)


def test_the_last_in_sync_broker_down_makes_its_partitions_offline():
    single = {"logs": [(0, 1, [1, 2], [1]), (1, 2, [1, 2], [2, 1])]}
    events = [layout(0, single, default_min=1), *_heartbeats(2, 30), hb(t(0), 1), later(past(t(9)))]
    alerts = run(sorted(events, key=lambda e: e.ts))
    impact = _firing(alerts, 1)["details"]["impact"]
    assert (impact["partitions_led"], impact["replicas_held"], impact["partitions_offline"],
            impact["partitions_under_min_isr"]) == (1, 2, 1, 0)


def test_a_deadline_before_a_layout_is_decided_with_the_layout_before_it():
    # Broker 1's deadline (9 s) falls before the layout at 12 s that no longer lists it: whatever the
    # micro-batches (run() cuts them three ways), the alert says what the layout at 0 s said.
    events = [hb(t(0), 1), *_heartbeats(2, 20), *_heartbeats(3, 20), layout(0, HEALTHY, MIN2),
              layout(12, ONE_FENCED, MIN2), later(past(t(20)))]
    impact = _firing(run(sorted(events, key=lambda e: e.ts)), 1)["details"]["impact"]
    assert impact["layout_at"] == t(0)


def test_no_layout_no_impact_and_other_brokers_are_down_as_far_as_the_layout_says():
    events = [hb(t(0), 1), later(past(t(9)))]
    assert "impact" not in _firing(run(events), 1)["details"]
    # Broker 1 fenced by Kafka (out of the ISRs, fenced flags), broker 2 stops: its partitions drop
    # under min ISR. With a layout that still lists broker 1 in sync, nothing drops.
    for shown, under in ((ONE_FENCED, 6), (HEALTHY, 0)):
        events = [layout(0, shown, MIN2), hb(t(0), 1, fenced=True), *_heartbeats(1, 40), *_heartbeats(2, 15),
                  later(past(t(40)))]
        alerts = run(sorted(events, key=lambda e: e.ts))
        assert any(a["rule"] == "broker.fenced" and a["starts_at"] == t(0) + FENCED_GRACE for a in alerts)
        lost = _firing(alerts, 2)
        assert (lost["cluster_id"], lost["details"]["impact"]["partitions_under_min_isr"]) == (C, under)
