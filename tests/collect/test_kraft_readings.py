"""The rules over what the probe reports of real KRaft clusters (measured on Kafka 4.4).

Plain Python, no Spark: each case is what the probe emits in one of the situations the
real-Kafka tests (tests/pipeline/test_real_kafka_faults.py) produce, reduced to the events that decide it.
"""

from __future__ import annotations

from typing import Any

from support.rule_events import CONTROLLER_WINDOW, C, F, R, contract_event, later, lines, past, resp, t

from streaming.records.contract import Event

NO_CTL = "cluster.no_controller"


def unknown_controller(ts: int, responder: int) -> Event:
    """A successful answer whose DescribeQuorum was refused (e.g. no ACL): the controller is unknown."""
    obj: dict[str, Any] = {
        "type": "metadata_response", "ts": ts, "cluster_id": C, "target": "pay", "endpoint": f"b{responder}:9092",
        "expected": None, "responder_node_id": responder, "controller_id": None, "controller_known": False,
        "error": None, "latency_ms": 3, "brokers": []}
    return contract_event(obj)


def test_an_unknown_controller_is_not_no_controller():
    # Before: the probe kept Metadata's ControllerId (a random live broker in KRaft) -> false
    # flapping/disagreement; reporting null instead would read as "no controller".
    events = [resp(t(0), "pay", "b1:9092", C, responder=1, controller=3001)]
    events += [unknown_controller(t(s), 1 + int(s) % 3) for s in range(1, 60)]
    events += [later(past(t(60)))]
    assert lines(events) == []


def test_unknown_controller_answers_neither_name_nor_hide_a_real_no_controller():
    # A real "no controller" (-1) from every answer that could tell, unknown ones in between.
    events = [resp(t(0), "pay", "b1:9092", C, responder=1, controller=3001)]
    for s in range(1, 40):
        events.append(resp(t(s), "pay", "b1:9092", C, responder=1, controller=-1) if s % 2
                      else unknown_controller(t(s), 2))
    events.append(resp(t(40), "pay", "b1:9092", C, responder=1, controller=3002))
    assert lines(events) == [F(NO_CTL, C, t(1) + CONTROLLER_WINDOW), R(NO_CTL, C, t(1) + CONTROLLER_WINDOW, t(40))]


def test_one_cut_off_broker_reporting_no_controller_is_not_a_cluster_without_one():
    # The partitioned broker's forwarded DescribeQuorum times out (-1); the others name the leader.
    events = []
    for s in range(0, 60):
        events.append(resp(t(s), "pay", "b2:9092", C, expected=(C, 2), responder=2, controller=-1))
        events.append(resp(t(s) + 10, "pay", "b1:9092", C, expected=(C, 1), responder=1, controller=3001))
    events.append(later(past(t(60))))
    assert [line for line in lines(events) if line[1].startswith("cluster.")] == []


def test_the_whole_quorum_gone_is_no_controller_from_the_brokers_alone():
    # Two of three controllers killed: every broker's forwarded DescribeQuorum times out (-1).
    events = [resp(t(0), "pay", "b1:9092", C, responder=1, controller=3001)]
    for s in range(1, 30):
        events.append(resp(t(s), "pay", f"b{1 + s % 3}:9092", C, expected=(C, 1 + s % 3), responder=1 + s % 3,
                           controller=-1))
    events.append(resp(t(30), "pay", "b1:9092", C, responder=1, controller=3002))
    assert [line for line in lines(events) if line[1] == NO_CTL] == [
        F(NO_CTL, C, t(1) + CONTROLLER_WINDOW), R(NO_CTL, C, t(1) + CONTROLLER_WINDOW, t(30))]

