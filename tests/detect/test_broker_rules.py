"""The broker rules (SPEC section 4) on their scenarios (tests/support/rule_cases/broker.py),
and what else the broker trackers do: subject fields, repeated broker lists, unknown epochs."""

from __future__ import annotations

import pytest
from support.rule_cases import broker
from support.rule_events import (
    B2,
    B4,
    EPOCH,
    FENCED,
    HB_LOST,
    PARTITIONED,
    UNKNOWN,
    C,
    F,
    answers,
    bk,
    contract_event,
    enumerate_positions,
    hb,
    later,
    line_of,
    lines,
    past,
    resp,
    run,
    same_lines,
    state,
    t,
    table,
    table_ids,
)

from streaming.config import RuleBook
from streaming.detect import ShardEngine

SCENARIOS = table(broker.CASES)


@pytest.mark.parametrize(("rule", "scenario"), SCENARIOS, ids=table_ids(SCENARIOS))
def test_rule(rule, scenario):
    got = lines(scenario.events, scenario.book)
    same_lines(got, scenario.expected)


# -- subject fields of timer-fired alerts and of alerts fired by a response ------------------


def test_broker_alert_fired_by_a_response_names_its_target_timer_alerts_do_not():
    alerts = run([state(t(0), 2, "FENCED", "OFFLINE"), *answers([1]), later(past(t(30)))])
    part = next(a for a in alerts if a["rule"] == PARTITIONED and a["status"] == "firing")
    fenced = next(a for a in alerts if a["rule"] == FENCED)
    assert part["target"] == "pay"
    assert fenced["target"] is None


def test_partitioned_fired_by_a_broker_list_names_the_response_target():
    # Broker 2 answered at 10 s and never heartbeated; at 12 s broker 1's answer lists it fenced.
    alerts = run([resp(t(10), "pay", "b2:9092", C, (C, 2), responder=2),
                  resp(t(12), "pay", "b1:9092", C, (C, 1), responder=1, brokers=[bk(2, "b2:9092", fenced=True)])])
    assert [(line_of(a), a["target"]) for a in alerts] == [(F(PARTITIONED, B2, t(12)), "pay")]


# -- broker lists repeated by nearly every response ----------------------------------------------


def test_a_repeated_broker_list_proves_time_passed_for_each_broker_it_lists():
    # Broker 2's last heartbeat is at 0 s; broker 1's answers at 1 s and at 10 s list it, the same way.
    engine = ShardEngine("cluster:" + C)
    listing = [bk(1, "b1:9092"), bk(2, "b2:9092")]
    events = [hb(t(0), 2), *(resp(t(s), "pay", "b1:9092", C, (C, 1), responder=1, brokers=listing) for s in (1, 10))]
    out = engine.process(list(enumerate_positions(events)), -(2**62), RuleBook())  # the watermark proves nothing
    assert [line_of(a.to_dict()) for a in out.alerts] == [F(HB_LOST, B2, t(9))]
    assert {b["broker_id"]: b["updated_ms"] for b in out.brokers} == {1: t(10), 2: t(10)}


def test_a_repeated_broker_list_sets_again_the_rack_a_heartbeat_changed():
    engine = ShardEngine("cluster:" + C)
    listing = [bk(1, "b1:9092") | {"rack": "r1"}]
    events = [resp(t(0), "pay", "b1:9092", C, (C, 1), responder=1, brokers=listing),
              contract_event({"type": "broker_heartbeat", "ts": t(1), "cluster_id": C, "broker_id": 1,
                              "kind": "heartbeat", "broker_epoch": 1, "rack": "r2"}),
              resp(t(2), "pay", "b1:9092", C, (C, 1), responder=1, brokers=listing)]
    out = engine.process(list(enumerate_positions(events[:2])), -(2**62), RuleBook())
    assert out.brokers[-1]["rack"] == "r2"
    out = engine.process(list(enumerate_positions(events[2:])), -(2**62), RuleBook())
    assert out.brokers[-1]["rack"] == "r1"


# -- unknown broker epochs ----------------------------------------------------------------------


def test_unknown_epoch_is_neither_a_regression_nor_the_highest():
    engine = ShardEngine("cluster:" + C)
    book = RuleBook()
    out = engine.process([(("", 0), hb(t(0), 4, epoch=10)), (("", 1), hb(t(1), 4, epoch=UNKNOWN))], -(2**62), book)
    assert out.alerts == []
    assert engine.brokers[4].max_epoch == 10 and out.brokers[-1]["broker_epoch"] == 10
    assert engine.brokers[4].last_hb == t(1)  # still a heartbeat for the other rules
    out = engine.process([(("", 2), hb(t(2), 4, epoch=9))], -(2**62), book)
    (alert,) = [a.to_dict() for a in out.alerts]
    assert line_of(alert) == F(EPOCH, B4, t(2))
    assert alert["details"]["broker_epoch"] == 9 and alert["details"]["highest_epoch"] == 10
