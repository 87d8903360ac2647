"""The reference detector of bench/reference/ gives the engine's alert lines, byte for byte.

`bench/replay_vs_reference.py` judges fleetwatch's replay by this reference detector (plain
Python, one process, no code shared with streaming.detect): it is checked here on every rule
scenario with the default settings, on the worked examples, and on simulated fleets: each fault
kind alone, mixed fleets of every shape the simulator's tests use, and a fleet with every fault
kind delivered out of order. It is the one oracle of the rules outside the product: the
simulator labels only what it injected (tests/collect/test_simulate.py checks its faults against
this detector), and bench/accuracy.py scores the product against it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.paths import EXAMPLES
from support.reference import REFERENCE, as_lines, reference_alerts
from support.rule_cases import ALL_CASES

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.config import RuleSettings
from streaming.detect import detect
from streaming.records.contract import Event, event_from_dict, parse_message

START_MS = 1_764_000_000_000


def engine_alerts(events: list[Event]) -> list[dict[str, Any]]:
    return [a.to_dict() for a in detect(events)]


DEFAULT_CASES = [(rule, c) for rule, c in ALL_CASES if c.book is None]  # the reference has no config


@pytest.mark.parametrize(("rule", "scenario"), DEFAULT_CASES, ids=[f"{r}: {c.name}" for r, c in DEFAULT_CASES])
def test_the_reference_gives_the_engines_lines_on_every_rule_scenario(rule, scenario):
    assert reference_alerts(as_lines(scenario.events)) == engine_alerts(scenario.events)


LATE_CASES = [(rule, c) for rule, c in ALL_CASES if c.book is not None
              and c.book.defaults == RuleSettings(heartbeat_late_ratio=0.5)]


@pytest.mark.parametrize(("rule", "scenario"), LATE_CASES, ids=[f"{r}: {c.name}" for r, c in LATE_CASES])
def test_the_reference_gives_the_engines_lines_with_heartbeat_late_on(rule, scenario):
    assert LATE_CASES  # broker.heartbeat_late's scenarios (4.5 s of the 9 s session)
    alerts, late, skipped = REFERENCE.detect(as_lines(scenario.events), heartbeat_late_ms=4500)
    assert (late, skipped) == (0, 0)
    assert alerts == [a.to_dict() for a in detect(scenario.events, scenario.book)]


@pytest.mark.skipif(not EXAMPLES.is_dir(), reason=f"worked examples not found at {EXAMPLES}")
@pytest.mark.parametrize("name", ["heartbeat-and-fence", "misroute", "identity", "controller"])
def test_the_reference_gives_the_engines_lines_on_the_worked_examples(name):
    raw = [line for line in (EXAMPLES / f"{name}.jsonl").read_bytes().splitlines() if line.strip()]
    assert reference_alerts(raw) == engine_alerts([parse_message(line) for line in raw])


def simulated_lines(spec: FleetSpec) -> tuple[list[str], list[Event]]:
    """A simulated stream as the simulator writes it (absent fields absent), and as events."""
    raw = [ev for _, ev in Simulation(spec).events()]
    return [json.dumps(ev) for ev in raw], [event_from_dict(ev) for ev in raw]


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_the_reference_gives_the_engines_lines_on_each_fault_kind_alone(kind):
    lines, events = simulated_lines(FleetSpec(clusters=2, brokers=3, faults=(kind,), start_ms=START_MS,
                                              duration_ms=420_000, fault_every_ms=600_000))
    expected = engine_alerts(events)
    assert kind in {a["rule"] for a in expected}
    assert reference_alerts(lines) == expected


# Small fleets, a fault every 20 s: with one cluster, the other cluster a fault involves is one the
# prober does not watch; with one broker, it is the bootstrap broker too. (Every kind on 16 clusters:
# the out-of-order fleet below.)
@pytest.mark.parametrize(("clusters", "brokers", "minutes", "every_ms", "seed"), [
    (1, 2, 40, 20_000, 0), (2, 1, 40, 20_000, 3)])
def test_the_reference_gives_the_engines_lines_on_mixed_fleets(clusters, brokers, minutes, every_ms, seed):
    lines, events = simulated_lines(FleetSpec(clusters=clusters, brokers=brokers, faults=FAULT_KINDS,
                                              start_ms=START_MS, duration_ms=minutes * 60_000,
                                              fault_every_ms=every_ms, seed=seed))
    assert reference_alerts(lines) == engine_alerts(events) != []


def test_the_reference_gives_the_engines_lines_on_a_faulty_fleet_delivered_out_of_order():
    spec = FleetSpec(clusters=len(FAULT_KINDS), brokers=3, faults=FAULT_KINDS, start_ms=START_MS,
                     duration_ms=900_000, fault_every_ms=45_000, jitter_ms=1500, seed=11)
    raw = [ev for _, ev in Simulation(spec).events()]  # as the simulator writes them: absent fields absent
    expected = engine_alerts([event_from_dict(ev) for ev in raw])
    # every rule fires but broker.heartbeat_late, which is off by default (issue 31), and collector.silent
    # (issue 41: the simulator sends no collector rounds); the partition layout rules (issue 30) too, and
    # every broker incident carries its impact on the simulated topics
    assert {a["rule"] for a in expected} == set(REFERENCE.SEVERITY) - {"broker.heartbeat_late", "collector.silent"}
    assert all("impact" in a["details"] for a in expected if a["rule"].startswith("broker."))
    assert reference_alerts([json.dumps(ev) for ev in raw]) == expected


def test_the_reference_sets_late_lines_and_non_events_aside():
    lines = [json.dumps({"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": ts, "source": "a",
                         "cluster_id": "c", "broker_id": 1, "kind": "heartbeat", "broker_epoch": 1})
             for ts in (10_000, 20_000, 14_000)] + ["not json", json.dumps({"schema": "other"})]
    alerts, late, skipped = REFERENCE.detect(lines)
    assert (late, skipped) == (1, 2)  # 14,000 < 20,000 - 5,000
    # Had the heartbeat at 14,000 counted, no gap would have been longer than the session timeout.
    assert [(a["rule"], a["status"], a["ends_at"]) for a in alerts] == [
        ("broker.heartbeat_lost", "firing", None), ("broker.heartbeat_lost", "resolved", 20_000)]
