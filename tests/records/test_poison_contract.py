"""Contract bounds (SPEC section 3, amended 2026-11-24): no value of any field gets past the parse
stage if it could fail a batch further on. Each refusal has a reason of bounded cardinality.
"""

from __future__ import annotations

import json
import time

import pytest

from streaming.records.contract import (
    EARLIEST_TS_MS,
    MAX_ENDPOINT_CHARS,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    Rejected,
    event_from_dict,
    event_to_dict,
    latest_valid_ts,
    parse_message,
)

NOW_MS = 1_795_000_000_000
LATEST = latest_valid_ts(300_000, now_ms=NOW_MS)
TS = NOW_MS - 60_000


def heartbeat(**over):
    return {"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": TS, "source": "agent-1",
            "cluster_id": "PayPayPayPayPayPayPayA", "broker_id": 1, "kind": "heartbeat", "broker_epoch": 5, **over}


def state(**over):
    return {"schema": "fleetwatch.event/v1", "type": "broker_state", "ts": TS, "source": "agent-1",
            "cluster_id": "PayPayPayPayPayPayPayA", "broker_id": 1, "state": "ONLINE", **over}


def response(**over):
    return {"schema": "fleetwatch.event/v1", "type": "metadata_response", "ts": TS, "source": "probe-1",
            "cluster_id": "PayPayPayPayPayPayPayA", "target": "pay", "endpoint": "b1:9092",
            "expected": {"cluster_id": "PayPayPayPayPayPayPayA", "node_id": 1}, "responder_node_id": 1,
            "controller_id": 1, "error": None, "latency_ms": 3,
            "brokers": [{"node_id": 1, "host": "b1", "port": 9092}], **over}


def refused(obj) -> Rejected:
    with pytest.raises(Rejected) as info:
        event_from_dict(obj, LATEST)
    # the same refusal through the message path, as the job parses
    with pytest.raises(Rejected) as again:
        parse_message(json.dumps(obj), None, LATEST)
    assert (again.value.reason, again.value.detail) == (info.value.reason, info.value.detail)
    return info.value


@pytest.mark.parametrize(("ts", "where"), [
    (2**63, "future"),  # the poison: int64 overflow in Arrow
    (2**64 - 1, "future"),  # the largest integer JSON parsers give as an int
    (NOW_MS * 1000, "future"),  # microseconds
    (NOW_MS * 1_000_000, "future"),  # nanoseconds
    (LATEST + 1, "future"),
    (EARLIEST_TS_MS - 1, "past"),
    (NOW_MS // 1000, "past"),  # seconds
    (0, "past"),
    (-(2**63), "past"),
])
def test_ts_out_of_range_is_refused_and_says_which_side(ts, where):
    for make in (heartbeat, state, response):
        exc = refused(make(ts=ts))
        assert exc.reason == "ts_out_of_range"
        assert exc.detail.startswith(f"in the {where}")


def test_ts_within_the_bounds_is_accepted():
    for ts in (EARLIEST_TS_MS, TS, LATEST):
        assert event_from_dict(heartbeat(ts=ts), LATEST).ts == ts


def test_the_default_bound_is_the_wall_clock_plus_five_minutes():
    now = int(time.time() * 1000)
    assert event_from_dict(heartbeat(ts=now + 290_000)).ts == now + 290_000
    assert refused_default(heartbeat(ts=now + 310_000)) == "ts_out_of_range"


def refused_default(obj) -> str:
    with pytest.raises(Rejected) as info:
        event_from_dict(obj)
    return info.value.reason


INT32_FIELDS = [
    (heartbeat, "broker_id"), (state, "broker_id"), (response, "responder_node_id"), (response, "controller_id"),
]


@pytest.mark.parametrize(("make", "field"), INT32_FIELDS)
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**63, 2**64 - 1])
def test_ids_outside_32_bits_are_refused(make, field, value):
    exc = refused(make(**{field: value}))
    assert exc.reason == f"out_of_range:{field}"
    assert "32-bit" in exc.detail


@pytest.mark.parametrize(("make", "field"), INT32_FIELDS)
def test_ids_at_the_32_bit_limits_are_accepted(make, field):
    for value in (2**31 - 1, -(2**31)):
        assert getattr(event_from_dict(make(**{field: value}), LATEST), field) == value


def test_nested_ids_and_ports_outside_32_bits_are_refused():
    assert refused(response(expected={"cluster_id": "x", "node_id": 2**31})).reason == "out_of_range:expected.node_id"
    brokers = [{"node_id": 1, "host": "b1", "port": 9092}, {"node_id": 2**40, "host": "b2", "port": 9092}]
    assert refused(response(brokers=brokers)).reason == "out_of_range:brokers[1].node_id"
    brokers = [{"node_id": 1, "host": "b1", "port": 2**32}]
    assert refused(response(brokers=brokers)).reason == "out_of_range:brokers[0].port"
    endpoints = [{"host": "b1", "port": 2**31}]
    assert refused(heartbeat(kind="registration", endpoints=endpoints)).reason == "out_of_range:endpoints[0].port"


@pytest.mark.parametrize(("make", "field"), [
    (heartbeat, "broker_epoch"), (heartbeat, "metadata_offset"), (state, "broker_epoch"), (response, "latency_ms"),
])
def test_epochs_offsets_and_latencies_are_bounded_by_64_bits(make, field):
    assert getattr(event_from_dict(make(**{field: 2**63 - 1}), LATEST), field) == 2**63 - 1
    assert refused(make(**{field: 2**63})).reason == f"out_of_range:{field}"
    with pytest.raises(Rejected, match=f"out_of_range:{field}"):
        event_from_dict(make(**{field: -(2**63) - 1}), LATEST)  # JSON parsers give it as a float


LONG_FIELDS = [
    (heartbeat, "cluster_id", MAX_NAME_CHARS), (heartbeat, "source", MAX_NAME_CHARS),
    (heartbeat, "rack", MAX_NAME_CHARS), (state, "reason", MAX_TEXT_CHARS),
    (response, "target", MAX_NAME_CHARS), (response, "endpoint", MAX_ENDPOINT_CHARS),
    (response, "error", MAX_NAME_CHARS), (response, "cluster_id", MAX_NAME_CHARS),
]


@pytest.mark.parametrize(("make", "field", "limit"), LONG_FIELDS)
def test_strings_are_bounded(make, field, limit):
    assert getattr(event_from_dict(make(**{field: "x" * limit}), LATEST), field) == "x" * limit
    exc = refused(make(**{field: "x" * (limit + 1)}))
    assert exc.reason == f"too_long:{field}"
    assert str(limit) in exc.detail


def test_nested_strings_are_bounded():
    long = "h" * (MAX_NAME_CHARS + 1)
    assert refused(response(expected={"cluster_id": long, "node_id": 1})).reason == "too_long:expected.cluster_id"
    assert refused(response(brokers=[{"node_id": 1, "host": long, "port": 1}])).reason == "too_long:brokers[0].host"
    assert refused(response(brokers=[{"node_id": 1, "host": "b", "port": 1, "rack": long}])).reason == \
        "too_long:brokers[0].rack"
    endpoints = [{"host": "b", "port": 1, "listener": long}]
    assert refused(heartbeat(kind="registration", endpoints=endpoints)).reason == "too_long:endpoints[0].listener"


def test_a_refused_value_is_not_echoed_in_full():
    # Details go to the store and the logs: an attacker's megabyte must not be copied around.
    exc = refused(state(state="X" * 100_000))
    assert exc.reason == "invalid_value:state" and len(exc.detail) <= MAX_NAME_CHARS
    assert len(refused(heartbeat(type="T" * 100_000)).detail) <= MAX_NAME_CHARS


@pytest.mark.parametrize("make", [heartbeat, state])
@pytest.mark.parametrize("cluster_id", [None, ""])
def test_a_broker_event_without_a_cluster_id_is_quarantined(make, cluster_id):
    # Brokers are known by (cluster id, broker id): without the cluster, brokers of different
    # clusters would be merged (false epoch regressions). streaming/detect/README.md.
    exc = refused(make(cluster_id=cluster_id))
    assert exc.reason == "missing_cluster_id"


def test_a_response_without_a_cluster_id_is_still_an_event():
    # Target rules need them: an error answer, or a cluster without an id (cluster.id_invalid).
    assert event_from_dict(response(cluster_id=None), LATEST).cluster_id is None
    assert event_from_dict(response(cluster_id=None, error="TIMEOUT", brokers=None), LATEST).error == "TIMEOUT"


def test_the_controller_epoch_is_an_optional_64_bit_integer():
    # A contract addition (streaming/detect/README.md): absent or null is unknown, as before it existed.
    assert event_from_dict(response(), LATEST).controller_epoch is None
    assert event_from_dict(response(controller_epoch=None), LATEST).controller_epoch is None
    assert event_from_dict(response(controller_epoch=2**40), LATEST).controller_epoch == 2**40
    assert refused(response(controller_epoch=2**63)).reason == "out_of_range:controller_epoch"
    assert refused(response(controller_epoch=True)).reason.startswith("wrong_type")
    event = event_from_dict(response(controller_epoch=7), LATEST)
    assert event_from_dict(event_to_dict(event), LATEST) == event
