"""Quorum readings (issue 44; streaming/detect/README.md, "Before Kafka knows: quorum readings") on their
scenarios (tests/support/rule_cases/readings.py), and what the alerts say, and that a reading decides them
itself, whatever the watermark."""

from __future__ import annotations

import pytest
from support.rule_cases import readings as reading_cases
from support.rule_cases.readings import frozen, readings, stopped_at
from support.rule_events import (
    B1,
    HB_LOST,
    SESSION,
    STALL_AFTER,
    STALLED,
    C,
    hb,
    lines,
    merged,
    run,
    same_lines,
    state,
    t,
    table,
    table_ids,
)

from streaming.detect import detect
from streaming.records.contract import QuorumReading, event_from_dict, event_to_dict

SCENARIOS = table(reading_cases.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    got = lines(scenario.events, scenario.book)
    same_lines(got, scenario.expected)


def _firing(alerts: list[dict], rule: str) -> dict:
    return next(a for a in alerts if a["rule"] == rule and a["status"] == "firing")


def test_a_stall_fires_with_the_reading_that_shows_it_long_before_the_watermark_passes_it():
    events = readings(0, 7, frozen(4))  # the last event is the reading at 7 s: the watermark is at 2 s
    stalled = _firing(run(events), STALLED)
    assert stalled["starts_at"] == stopped_at(4) + STALL_AFTER > events[-1].ts - 5000
    assert stalled["severity"] == "warning" and (stalled["cluster_id"], stalled["broker_id"]) == B1
    assert stalled["summary"] == "pay: broker 1 has not fetched from its controller for 3.1 s"
    assert stalled["details"] == {"last_fetch_ms": stopped_at(4), "fetch_age_ms": 3100}


def test_heartbeat_lost_escalates_the_open_stall_one_incident():
    alerts = run(readings(0, 14, frozen(4)))
    stalled, lost = _firing(alerts, STALLED), _firing(alerts, HB_LOST)
    assert lost["starts_at"] == stopped_at(4) + SESSION
    assert lost["details"] == {"last_heartbeat_ms": stopped_at(4), "escalates": stalled["alert_id"]}


def test_the_fence_of_a_stalled_broker_pages_with_its_reading():
    events = readings(0, 8, frozen(4, fenced_from=8))
    lost = _firing(run(events), HB_LOST)
    assert lost["starts_at"] == events[-1].ts  # the reading that shows the fence, 4.9 s before the deadline
    assert lost["summary"] == "pay: broker 1 was fenced by its controller after no heartbeat for 4.1 s"
    assert lost["details"]["escalates"] == _firing(run(events), STALLED)["alert_id"]


def test_a_page_without_a_stall_carries_no_escalation():
    # No reading showed the stall (none came between 4 and 13 s): the session's deadline alone.
    lost = _firing(run(merged(readings(0, 4, frozen(100)), readings(13, 13, frozen(4)))), HB_LOST)
    assert "escalates" not in lost["details"]


@pytest.mark.parametrize("batch_size", [None, 1, 3])
def test_back_from_a_stop_its_session_runs_from_the_unfence_whatever_reaches_the_job_first(batch_size):
    # Real Kafka 4.4, a rolling restart: a probe round saw the restarted broker unfenced before any reading
    # did, its answers went out as they came and its heartbeats at the round's end. The unfence (17.01 s)
    # reached the job before its first heartbeat back (16.95 s), and its session ran from its heartbeat
    # before the stop (5.4 s): a false broker.heartbeat_lost. Kafka unfences a broker only on a heartbeat
    # of its own: its session runs from the unfence at the earliest.
    events = [*readings(0, 16, frozen(5.5, fenced_from=5)), state(t(17.01), 1, "ONLINE", "FENCED"), hb(t(16.95), 1),
              *readings(18, 30, lambda s: (100, False))]
    assert [a.rule for a in detect(events, batch_size=batch_size) if a.rule.startswith("broker.")] == []


def test_a_reading_goes_through_the_contract_unchanged():
    reading = readings(3, 3, frozen(1, fenced_from=3))[0]
    assert isinstance(reading, QuorumReading) and reading.cluster_id == C
    assert reading.fetches == ((1, 2100, True), (2, 100, False))
    assert event_from_dict(event_to_dict(reading)) == reading
