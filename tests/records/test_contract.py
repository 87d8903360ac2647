"""Event contract v1 (SPEC section 3): what parses, and the reason for every refusal."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from streaming.records import topics
from streaming.records.contract import (
    BrokerHeartbeat,
    BrokerState,
    MetadataResponse,
    Rejected,
    event_from_dict,
    event_to_dict,
    parse_message,
)

# The three sample events of SPEC section 3, verbatim.
SPEC_METADATA = """{"schema":"fleetwatch.event/v1","type":"metadata_response","ts":1763800000000,"source":"probe-1",
 "cluster_id":"MkU3OEVBNTcwNTJENDM2Qg","target":"payments-eu1","endpoint":"b1.pay:9092",
 "expected":{"cluster_id":"MkU3OEVBNTcwNTJENDM2Qg","node_id":1},
 "responder_node_id":1,"controller_id":2,"error":null,"latency_ms":4,
 "brokers":[{"node_id":1,"host":"b1.pay","port":9092,"rack":"a","fenced":false}]}"""

SPEC_STATE = """{"schema":"fleetwatch.event/v1","type":"broker_state","ts":1763800001000,"source":"agent-b3",
 "cluster_id":"MkU3OEVBNTcwNTJENDM2Qg","broker_id":3,"state":"FENCED","previous_state":"ONLINE",
 "broker_epoch":42,"reason":"session timeout"}"""

SPEC_HEARTBEAT = """{"schema":"fleetwatch.event/v1","type":"broker_heartbeat","ts":1763800002000,"source":"agent-b3",
 "cluster_id":"MkU3OEVBNTcwNTJENDM2Qg","broker_id":3,"kind":"heartbeat","broker_epoch":42,
 "metadata_offset":1234,"want_fence":false,"want_shutdown":false,"fenced":false,"caught_up":true,
 "rack":"a","endpoints":[{"listener":"PLAINTEXT","host":"b3.pay","port":9092,"security_protocol":"PLAINTEXT"}]}"""

SAMPLES = {"metadata_response": SPEC_METADATA, "broker_state": SPEC_STATE, "broker_heartbeat": SPEC_HEARTBEAT}
TOPIC_OF = {
    "metadata_response": topics.METADATA,
    "broker_state": topics.BROKER_STATES,
    "broker_heartbeat": topics.HEARTBEATS,
}


def sample(kind: str) -> dict[str, Any]:
    return json.loads(SAMPLES[kind])


def reason_of(raw: Any, topic: str | None = None) -> str:
    with pytest.raises(Rejected) as info:
        parse_message(raw, topic)
    return info.value.reason


def dict_reason(obj: Any) -> str:
    with pytest.raises(Rejected) as info:
        event_from_dict(obj)
    # the same refusal through the message path
    with pytest.raises(Rejected) as again:
        parse_message(json.dumps(obj))
    assert again.value.reason == info.value.reason
    return info.value.reason


def _locate(obj: dict[str, Any], path: str) -> tuple[dict[str, Any], Any, Any]:
    """A deep copy of obj, the container of the dotted path in it, and the key in that container."""
    out = copy.deepcopy(obj)
    *parents, last = (int(p) if p.isdigit() else p for p in path.split("."))
    node: Any = out
    for p in parents:
        node = node[p]
    return out, node, last


def without(obj: dict[str, Any], path: str) -> dict[str, Any]:
    out, node, key = _locate(obj, path)
    del node[key]
    return out


def setting(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out, node, key = _locate(obj, path)
    node[key] = value
    return out


# -- the SPEC samples ------------------------------------------------------------------------


def test_spec_metadata_sample_parses():
    ev = parse_message(SPEC_METADATA, topics.METADATA)
    assert isinstance(ev, MetadataResponse)
    assert (ev.ts, ev.source, ev.cluster_id, ev.target, ev.endpoint) == (
        1763800000000, "probe-1", "MkU3OEVBNTcwNTJENDM2Qg", "payments-eu1", "b1.pay:9092")
    assert ev.expected is not None
    assert (ev.expected.cluster_id, ev.expected.node_id) == ("MkU3OEVBNTcwNTJENDM2Qg", 1)
    assert (ev.responder_node_id, ev.controller_id, ev.error, ev.latency_ms) == (1, 2, None, 4)
    assert ev.ok
    assert ev.brokers is not None and len(ev.brokers) == 1
    b = ev.brokers[0]
    assert (b.node_id, b.host, b.port, b.rack, b.fenced, b.address) == (1, "b1.pay", 9092, "a", False, "b1.pay:9092")


def test_spec_state_sample_parses():
    ev = parse_message(SPEC_STATE.encode(), topics.BROKER_STATES)
    assert isinstance(ev, BrokerState)
    assert (ev.ts, ev.source, ev.cluster_id, ev.broker_id, ev.state, ev.previous_state, ev.broker_epoch,
            ev.reason) == (1763800001000, "agent-b3", "MkU3OEVBNTcwNTJENDM2Qg", 3, "FENCED", "ONLINE", 42,
                           "session timeout")


def test_spec_heartbeat_sample_parses():
    # want_fence, want_shutdown, caught_up are not part of the record: extra fields are ignored.
    ev = parse_message(SPEC_HEARTBEAT, topics.HEARTBEATS)
    assert isinstance(ev, BrokerHeartbeat)
    assert (ev.ts, ev.cluster_id, ev.broker_id, ev.kind, ev.broker_epoch, ev.metadata_offset, ev.fenced,
            ev.rack) == (1763800002000, "MkU3OEVBNTcwNTJENDM2Qg", 3, "heartbeat", 42, 1234, False, "a")
    assert ev.endpoints is not None
    (e,) = ev.endpoints
    assert (e.host, e.port, e.listener, e.security_protocol, e.address) == (
        "b3.pay", 9092, "PLAINTEXT", "PLAINTEXT", "b3.pay:9092")


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_normalized_form_round_trips(kind):
    ev = event_from_dict(sample(kind))
    assert event_from_dict(json.loads(json.dumps(event_to_dict(ev)))) == ev


def test_minimal_heartbeat_needs_only_broker_id_kind_epoch():
    ev = event_from_dict({"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": 1763800002000,
                          "source": "s", "cluster_id": "c", "broker_id": 7, "kind": "registration",
                          "broker_epoch": 0})
    assert isinstance(ev, BrokerHeartbeat)
    assert (ev.cluster_id, ev.broker_id, ev.kind, ev.broker_epoch, ev.fenced, ev.endpoints) == (
        "c", 7, "registration", 0, None, None)


def test_error_response_with_nulls_parses():
    obj = sample("metadata_response")
    obj.update(cluster_id=None, expected=None, responder_node_id=None, controller_id=None,
               error="CONNECTION_REFUSED", latency_ms=None, brokers=None)
    ev = event_from_dict(obj)
    assert isinstance(ev, MetadataResponse)
    assert not ev.ok
    assert (ev.cluster_id, ev.expected, ev.controller_id, ev.brokers) == (None, None, None, None)


def test_broker_fenced_is_optional():
    obj = without(sample("metadata_response"), "brokers.0.fenced")
    ev = event_from_dict(obj)
    assert ev.brokers is not None and ev.brokers[0].fenced is None


# -- unknown extra fields are ignored ---------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_unknown_extra_fields_are_ignored(kind):
    plain = event_from_dict(sample(kind))
    extra = sample(kind)
    extra["future_field"] = {"nested": [1, 2, 3]}
    extra["x-debug"] = None
    if kind == "metadata_response":
        extra["brokers"][0]["zone"] = "eu-1a"
        extra["expected"]["hint"] = True
    if kind == "broker_heartbeat":
        extra["endpoints"][0]["tls"] = {"v": 1.3}
    assert event_from_dict(extra) == plain


# -- rejection reasons ------------------------------------------------------------------------


def test_not_utf8_bytes():
    assert reason_of(b'{"schema": "fleetwatch.event/v1", "x": "\xff\xfe"}') == "not_utf8"


def test_not_utf8_replacement_character_from_a_lenient_decoder():
    raw = b'{"schema": "\xff"}'.decode("utf-8", errors="replace")
    assert reason_of(raw) == "not_utf8"


def test_empty_message():
    assert reason_of(None) == "empty_message"


@pytest.mark.parametrize("raw", ["", "{", "not json", "{'a': 1}", '{"a": 1,}', b"\x00\x01", "[" * 100_000])
def test_not_json(raw):
    assert reason_of(raw) == "not_json"


@pytest.mark.parametrize("raw", ["[]", "[1, 2]", "42", '"text"', "null", "true"])
def test_not_an_object(raw):
    assert reason_of(raw) == "not_an_object"


def test_not_an_object_from_dict_entry_point():
    with pytest.raises(Rejected) as info:
        event_from_dict(["schema"])
    assert info.value.reason == "not_an_object"


@pytest.mark.parametrize("schema", ["fleetwatch.event/v2", "fleetwatch.alert/v1", ""])
def test_unknown_schema(schema):
    assert dict_reason(setting(sample("broker_state"), "schema", schema)) == "unknown_schema"


@pytest.mark.parametrize("kind", ["metadata", "broker_states", "Broker_State", ""])
def test_unknown_type(kind):
    assert dict_reason(setting(sample("broker_state"), "type", kind)) == "unknown_type"


REQUIRED = {
    "metadata_response": ["schema", "type", "ts", "source", "cluster_id", "target", "endpoint", "expected",
                          "brokers.0.node_id", "brokers.0.host", "brokers.0.port"],
    "broker_state": ["schema", "type", "ts", "source", "cluster_id", "broker_id", "state"],
    "broker_heartbeat": ["schema", "type", "ts", "source", "cluster_id", "broker_id", "kind", "broker_epoch",
                         "endpoints.0.host", "endpoints.0.port"],
}


def _contract_path(path: str) -> str:
    """brokers.0.node_id -> brokers[0].node_id, as the contract names nested fields."""
    parts = path.split(".")
    out = parts[0]
    for p in parts[1:]:
        out += f"[{p}]" if p.isdigit() else f".{p}"
    return out


@pytest.mark.parametrize(("kind", "path"), [(k, p) for k, paths in REQUIRED.items() for p in paths])
def test_missing_required_field(kind, path):
    assert dict_reason(without(sample(kind), path)) == f"missing_field:{_contract_path(path)}"


OPTIONAL = {
    "metadata_response": ["responder_node_id", "controller_id", "error", "latency_ms", "brokers",
                          "brokers.0.rack", "brokers.0.fenced", "expected.cluster_id", "expected.node_id"],
    "broker_state": ["previous_state", "broker_epoch", "reason"],
    "broker_heartbeat": ["metadata_offset", "fenced", "rack", "endpoints", "endpoints.0.listener",
                         "endpoints.0.security_protocol"],
}


@pytest.mark.parametrize(("kind", "path"), [(k, p) for k, paths in OPTIONAL.items() for p in paths])
def test_optional_field_may_be_absent(kind, path):
    event_from_dict(without(sample(kind), path))


WRONG_TYPES = [
    # (kind, path, bad value)
    ("broker_state", "schema", 1),
    ("broker_state", "type", ["broker_state"]),
    ("broker_state", "ts", "1763800001000"),
    ("broker_state", "ts", 1763800001000.5),
    ("broker_state", "ts", True),  # a boolean is not an int
    ("broker_state", "ts", None),
    ("broker_state", "source", 7),
    ("broker_state", "cluster_id", 12345),
    ("broker_state", "broker_id", "3"),
    ("broker_state", "broker_id", False),
    ("broker_state", "state", 1),
    ("broker_state", "previous_state", 2),
    ("broker_state", "broker_epoch", True),
    ("broker_state", "reason", ["x"]),
    ("broker_heartbeat", "broker_id", True),
    ("broker_heartbeat", "broker_id", None),
    ("broker_heartbeat", "broker_epoch", "42"),
    ("broker_heartbeat", "broker_epoch", False),
    ("broker_heartbeat", "broker_epoch", 42.0),
    ("broker_heartbeat", "kind", None),
    ("broker_heartbeat", "metadata_offset", True),
    ("broker_heartbeat", "fenced", 0),
    ("broker_heartbeat", "fenced", "false"),
    ("broker_heartbeat", "rack", 1),
    ("broker_heartbeat", "endpoints", {"host": "b3.pay"}),
    ("broker_heartbeat", "endpoints.0", "b3.pay:9092"),
    ("broker_heartbeat", "endpoints.0.host", 1),
    ("broker_heartbeat", "endpoints.0.port", "9092"),
    ("broker_heartbeat", "endpoints.0.port", True),
    ("broker_heartbeat", "endpoints.0.listener", 5),
    ("metadata_response", "target", None),
    ("metadata_response", "target", 3),
    ("metadata_response", "endpoint", ["b1.pay", 9092]),
    ("metadata_response", "expected", "MkU3OEVBNTcwNTJENDM2Qg"),
    ("metadata_response", "expected", [1]),
    ("metadata_response", "expected.cluster_id", 9),
    ("metadata_response", "expected.node_id", "1"),
    ("metadata_response", "expected.node_id", True),
    ("metadata_response", "responder_node_id", "1"),
    ("metadata_response", "responder_node_id", True),
    ("metadata_response", "controller_id", False),
    ("metadata_response", "controller_id", 2.5),
    ("metadata_response", "error", 129),
    ("metadata_response", "latency_ms", "4"),
    ("metadata_response", "brokers", {"node_id": 1}),
    ("metadata_response", "brokers.0", [1, "b1.pay", 9092]),
    ("metadata_response", "brokers.0.node_id", "1"),
    ("metadata_response", "brokers.0.node_id", True),
    ("metadata_response", "brokers.0.host", None),
    ("metadata_response", "brokers.0.port", "9092"),
    ("metadata_response", "brokers.0.port", True),
    ("metadata_response", "brokers.0.rack", 1),
    ("metadata_response", "brokers.0.fenced", "no"),
    ("metadata_response", "brokers.0.fenced", 1),
]


@pytest.mark.parametrize(("kind", "path", "value"), WRONG_TYPES,
                         ids=[f"{k}-{p}-{v!r}" for k, p, v in WRONG_TYPES])
def test_wrong_type(kind, path, value):
    assert dict_reason(setting(sample(kind), path, value)) == f"wrong_type:{_contract_path(path)}"


def test_wrong_type_names_the_index_of_a_later_list_item():
    obj = sample("metadata_response")
    obj["brokers"].append({"node_id": 2, "host": "b2.pay", "port": "x"})
    assert dict_reason(obj) == "wrong_type:brokers[1].port"


@pytest.mark.parametrize(("kind", "path", "value"), [
    ("broker_state", "state", "RUNNING"),
    ("broker_state", "state", "online"),
    ("broker_state", "previous_state", "STARTING"),
    ("broker_heartbeat", "kind", "HEARTBEAT"),
    ("broker_heartbeat", "kind", "unregistration"),
])
def test_invalid_value(kind, path, value):
    assert dict_reason(setting(sample(kind), path, value)) == f"invalid_value:{path}"


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_wrong_topic(kind):
    for topic in topics.TELEMETRY:
        if topic == TOPIC_OF[kind]:
            assert parse_message(SAMPLES[kind], topic).type == kind
        else:
            assert reason_of(SAMPLES[kind], topic) == "wrong_topic"


def test_no_topic_check_without_a_telemetry_topic():
    # A replay file has no topic; a non-telemetry topic name is not checked either.
    assert parse_message(SPEC_STATE).type == "broker_state"
    assert parse_message(SPEC_STATE, "some.other.topic").type == "broker_state"


def test_rejected_message_names_reason_and_detail():
    with pytest.raises(Rejected) as info:
        event_from_dict(setting(sample("broker_state"), "state", "RUNNING"))
    assert str(info.value) == "invalid_value:state: RUNNING"
    assert isinstance(info.value, ValueError)
