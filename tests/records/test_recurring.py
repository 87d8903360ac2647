"""A recurring message is validated and built once (issue 45): every message then parses to what
`parse_message` gives it, the same record or the same refusal, whatever the parser saw before it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.records import topics
from streaming.records.contract import Rejected, latest_valid_ts, parse_message, topic_of
from streaming.records.recurring import RecurringMessages

NOW_MS = 1_795_000_000_000
LATEST = latest_valid_ts(300_000, now_ms=NOW_MS)
TS = NOW_MS - 60_000


def heartbeat(**over: Any) -> dict[str, Any]:
    return {"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": TS, "source": "agent-1",
            "cluster_id": "PayPayPayPayPayPayPayA", "broker_id": 1, "kind": "heartbeat", "broker_epoch": 5,
            "metadata_offset": 70, "fenced": None, "rack": "a",
            "endpoints": [{"listener": "PLAINTEXT", "host": "b1", "port": 9092, "security_protocol": "PLAINTEXT"}],
            **over}


def response(**over: Any) -> dict[str, Any]:
    return {"schema": "fleetwatch.event/v1", "type": "metadata_response", "ts": TS, "source": "probe-1",
            "cluster_id": "PayPayPayPayPayPayPayA", "target": "pay", "endpoint": "b1:9092",
            "expected": {"cluster_id": "PayPayPayPayPayPayPayA", "node_id": 1}, "responder_node_id": 1,
            "controller_id": 1, "error": None, "latency_ms": 3,
            "brokers": [{"node_id": 1, "host": "b1", "port": 9092, "rack": "a", "fenced": None},
                        {"node_id": 2, "host": "b2", "port": 9092, "rack": "b", "fenced": None}], **over}


def outcome(parse: Any, text: str, topic: str | None = None) -> Any:
    """The record, or the refusal's reason, detail, time and source."""
    try:
        return parse(text, topic, LATEST)
    except Rejected as exc:
        return ("refused", exc.reason, exc.detail, exc.ts, exc.source)


def test_a_recurring_message_is_built_from_the_record_of_the_last_one_with_its_own_time_and_counters():
    parser = RecurringMessages()
    first = parser.parse(json.dumps(response()), topics.METADATA, LATEST)
    again = parser.parse(json.dumps(response(ts=TS + 2000, latency_ms=9)), topics.METADATA, LATEST)
    assert again == parse_message(json.dumps(response(ts=TS + 2000, latency_ms=9)), topics.METADATA, LATEST)
    assert (again.ts, again.latency_ms) == (TS + 2000, 9)
    assert again.brokers is first.brokers  # not validated and built again
    beat = parser.parse(json.dumps(heartbeat()), topics.HEARTBEATS, LATEST)
    next_beat = parser.parse(json.dumps(heartbeat(ts=TS + 2000, metadata_offset=71)), topics.HEARTBEATS, LATEST)
    assert (next_beat.ts, next_beat.metadata_offset) == (TS + 2000, 71)
    assert next_beat.endpoints is beat.endpoints
    # spelled otherwise (spacing, escapes), the same message
    respelled = json.dumps(heartbeat(ts=TS + 4000), indent=1).replace('"agent-1"', '"agent-\\u0031"')
    assert "\\u0031" in respelled
    assert parser.parse(respelled, None, LATEST).endpoints is beat.endpoints


@pytest.mark.parametrize("make", [heartbeat, response], ids=["heartbeat", "response"])
@pytest.mark.parametrize("change", [
    {"ts": TS + 1},
    {"ts": LATEST + 1},  # in the future: refused with its time and source
    {"ts": 999},  # before 2000
    {"ts": None}, {"ts": "1"}, {"ts": True}, {"ts": float(TS)},
    {"metadata_offset": None}, {"metadata_offset": 2**63}, {"metadata_offset": False}, {"metadata_offset": 7.0},
    {"latency_ms": None}, {"latency_ms": 2**63}, {"latency_ms": "3"}, {"latency_ms": True},
    {"broker_epoch": 6}, {"broker_epoch": 5.0}, {"broker_epoch": True}, {"fenced": True}, {"rack": "b"},
    {"controller_id": 2}, {"controller_id": 1.0}, {"error": "NETWORK_EXCEPTION"}, {"brokers": None},
    {"source": "x" * 256}, {"cluster_id": None}, {"cluster_id": ""}, {"schema": "fleetwatch.event/v2"},
    {"type": "broker_state"}, {"extra": {"deep": [1, 2, 3]}}, {"extra": [[[[]]]] * 3},
])
def test_after_its_last_one_every_variation_of_a_message_parses_as_parse_message_parses_it(make, change):
    parser = RecurringMessages()
    for known in (make(), make(ts=TS + 5)):  # remembered
        parser.parse(json.dumps(known), None, LATEST)
    variation = {**make(), **change}
    reordered = {k: variation[k] for k in sorted(variation)}
    for text in (json.dumps(variation), json.dumps(variation), json.dumps(reordered)):
        assert outcome(parser.parse, text) == outcome(parse_message, text)


def test_a_field_given_twice_counts_as_json_decoders_count_it():
    parser = RecurringMessages()
    parser.parse(json.dumps(heartbeat()), None, LATEST)
    # The last of two keys wins: this one says epoch 6, not the remembered message's 5.
    text = json.dumps(heartbeat())[:-1] + ', "broker_epoch": 6}'
    assert outcome(parser.parse, text).broker_epoch == 6 == outcome(parse_message, text).broker_epoch
    text = json.dumps(heartbeat())[:-1] + f', "ts": {LATEST + 1}}}'
    assert outcome(parser.parse, text) == outcome(parse_message, text)
    assert outcome(parser.parse, text)[1] == "ts_out_of_range"


def test_a_message_nested_deeper_than_can_be_remembered_still_parses_as_parse_message_parses_it():
    deep: Any = []
    for _ in range(600):  # orjson reads it, and writes at most 254 levels
        deep = [deep]
    parser = RecurringMessages()
    for ts in (TS, TS + 1):
        text = json.dumps(heartbeat(ts=ts, extra=deep))
        assert outcome(parser.parse, text) == outcome(parse_message, text)


def test_a_remembered_message_on_the_wrong_topic_is_still_refused():
    parser = RecurringMessages()
    parser.parse(json.dumps(heartbeat()), topics.HEARTBEATS, LATEST)
    text = json.dumps(heartbeat(ts=TS + 1))
    assert outcome(parser.parse, text, topics.METADATA)[:2] == ("refused", "wrong_topic")


def test_a_simulated_fleet_parses_the_same_through_a_parser_that_keeps_few_records():
    simulation = Simulation(FleetSpec(clusters=3, brokers=4, faults=FAULT_KINDS, start_ms=TS - 600_000,
                                      duration_ms=600_000, fault_every_ms=20_000, first_fault_ms=10_000, seed=7))
    texts = [json.dumps(event) for _, event in simulation.events()]
    parser = RecurringMessages(capacity=5)  # forgets all it knows again and again
    remembered = RecurringMessages()
    for text in texts:
        topic = topic_of(json.loads(text)["type"])
        expected = outcome(parse_message, text, topic)
        assert outcome(parser.parse, text, topic) == expected
        assert outcome(remembered.parse, text, topic) == expected


def test_a_record_asked_for_in_every_generation_is_kept_and_one_that_stopped_coming_is_forgotten():
    parser = RecurringMessages(capacity=1_000, generation=10)
    steady = parser.parse(json.dumps(response()), topics.METADATA, LATEST)
    gone = parser.parse(json.dumps(heartbeat()), topics.HEARTBEATS, LATEST)  # then never again
    for step in range(1, 50):  # five generations; the response comes every 9th message
        if step % 9 == 0:
            again = parser.parse(json.dumps(response(ts=TS + step)), topics.METADATA, LATEST)
            assert again.brokers is steady.brokers  # not built again
        else:
            parser.parse(json.dumps(heartbeat(broker_id=step)), topics.HEARTBEATS, LATEST)
    back = parser.parse(json.dumps(heartbeat(ts=TS + 99)), topics.HEARTBEATS, LATEST)
    assert back == parse_message(json.dumps(heartbeat(ts=TS + 99)), topics.HEARTBEATS, LATEST)
    assert back.endpoints is not gone.endpoints  # forgotten two generations ago: built again


def test_the_records_held_never_exceed_the_capacity_and_a_fleet_that_left_leaves_them():
    capacity = 400
    parser = RecurringMessages(capacity=capacity, generation=1_000)
    for broker in range(1_000):  # a fleet of 1,000 brokers, each heard once
        parser.parse(json.dumps(heartbeat(broker_id=broker, cluster_id="OldOldOldOldOldOldOldA")), None, LATEST)
        assert len(parser) <= capacity
    for beat in range(2_000):  # the fleet after it: 50 brokers, heard 40 times each
        parser.parse(json.dumps(heartbeat(broker_id=beat % 50, ts=TS + beat)), None, LATEST)
    assert len(parser) == 50  # two generations on, only the fleet that still speaks


def test_a_steady_state_above_half_the_capacity_is_built_once_whatever_the_generations():
    parser = RecurringMessages(capacity=100, generation=80)  # 70 brokers: each heard within a generation
    first = {broker: parser.parse(json.dumps(heartbeat(broker_id=broker)), None, LATEST) for broker in range(70)}
    for heard in range(1, 20):  # 19 more rounds of the 70 brokers: 17 generations
        for broker in range(70):
            again = parser.parse(json.dumps(heartbeat(broker_id=broker, ts=TS + heard)), None, LATEST)
            assert again.endpoints is first[broker].endpoints, (heard, broker)
        assert len(parser) == 70
