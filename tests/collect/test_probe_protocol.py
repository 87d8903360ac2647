"""The probe's Kafka codec against bytes laid out from Kafka's published message specs.

Three independent references:
- Kafka's own JSON specs (clients/src/main/resources/common/message/*.json), as kafka-python
  ships them verbatim: `specs.py` must equal them field by field (ApiVersions v5 is KIP-1242 on
  top of the v4 JSON; see the docstring of `specs.py` for where v5 comes from);
- bytes written out by hand here, field by field, from those specs (never by the codec);
- kafka-python's own JSON-generated message classes (for the versions it ships).
"""

from __future__ import annotations

import json
import re
import struct
from importlib.resources import files
from typing import Any

import pytest

from streaming.collect.protocol.client import ScramClient, error_name
from streaming.collect.protocol.codec import (
    DecodeError,
    decode_body,
    decode_request,
    decode_response,
    encode_body,
    encode_request,
    encode_response,
)
from streaming.collect.protocol.specs import SPECS

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


# ------------------------------------------------------------------ primitives, as the spec defines them

def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return b"\x01" if v else b"\x00"


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def compact_string(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: uvarint(length + 1), 0 for null."""
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def compact_array(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def legacy_string(s: str) -> bytes:
    return i16(len(s)) + s.encode()


NO_TAGS = uvarint(0)


def request_header_v2(api_key: int, version: int, correlation: int, client_id: str) -> bytes:
    # The client id keeps its int16 length even in the flexible header ("flexibleVersions": "none").
    return i16(api_key) + i16(version) + i32(correlation) + legacy_string(client_id) + NO_TAGS


def framed(payload: bytes) -> bytes:
    return i32(len(payload)) + payload


# ------------------------------------------------------------------ specs.py against Kafka's published JSON

# The keys of a field that decide its bytes ("about", "ignorable", "entityType", "mapKey" do not).
SHAPE = ("name", "type", "versions", "nullableVersions", "tag", "taggedVersions", "default")

# KIP-1242 adds these two request fields in v5, after ClientSoftwareVersion, untagged; the
# response gains no field (apache/kafka ApiVersionsResponse.json: "validVersions": "0-5").
KIP_1242_REQUEST_FIELDS = [
    {"name": "ClusterId", "type": "string", "versions": "5+", "nullableVersions": "5+", "default": "null"},
    {"name": "NodeId", "type": "int32", "versions": "5+", "default": "-1"},
]


def kafka_json(name: str) -> dict[str, Any]:
    """Kafka's JSON spec of one message, as kafka-python ships it (full-line // comments)."""
    text = files("kafka.protocol.schemas.resources").joinpath(f"{name}.json").read_text()
    assert "Licensed to the Apache Software Foundation" in text  # Kafka's file, header and all
    return json.loads(re.sub(r"(?m)^\s*//.*$", "", text))


def shape(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        item = {k: str(f[k]) for k in SHAPE if k in f}
        if "fields" in f:
            item["fields"] = shape(f["fields"])
        out.append(item)
    return out


def common_structs(message: dict[str, Any]) -> dict[str, Any]:
    return {s["name"]: shape(s["fields"]) for s in message.get("commonStructs", ())}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_specs_equal_kafkas_published_json(name):
    ours, theirs = SPECS[name], kafka_json(name)
    assert (ours["apiKey"], ours["type"], ours["flexibleVersions"]) == (
        theirs["apiKey"], theirs["type"], theirs["flexibleVersions"])
    assert common_structs(ours) == common_structs(theirs)
    if name == "ApiVersionsRequest":
        assert (ours["validVersions"], theirs["validVersions"]) == ("0-5", "0-4")
        assert shape(ours["fields"]) == shape(theirs["fields"]) + shape(KIP_1242_REQUEST_FIELDS)
    elif name == "ApiVersionsResponse":
        assert (ours["validVersions"], theirs["validVersions"]) == ("0-5", "0-4")
        assert shape(ours["fields"]) == shape(theirs["fields"])
    else:
        assert ours["validVersions"] == theirs["validVersions"]
        assert shape(ours["fields"]) == shape(theirs["fields"])


# ------------------------------------------------------------------ ApiVersions v5 (KIP-1242)

API_VERSIONS_V5_BODY = (
    compact_string("fleetwatch")        # ClientSoftwareName (3+)
    + compact_string("0.1.0")           # ClientSoftwareVersion (3+)
    + compact_string(CLUSTER_ID)        # ClusterId (5+, nullable)
    + i32(1)                            # NodeId (5+)
    + NO_TAGS
)
API_VERSIONS_V5 = {"ClientSoftwareName": "fleetwatch", "ClientSoftwareVersion": "0.1.0",
                   "ClusterId": CLUSTER_ID, "NodeId": 1}


def test_api_versions_v5_request_bytes():
    assert encode_body("ApiVersionsRequest", 5, API_VERSIONS_V5) == API_VERSIONS_V5_BODY
    frame = encode_request("ApiVersionsRequest", 5, 42, "fleetwatch-probe", API_VERSIONS_V5)
    assert frame == framed(request_header_v2(18, 5, 42, "fleetwatch-probe") + API_VERSIONS_V5_BODY)
    spec, version, correlation, client_id, body = decode_request(frame[4:])
    assert (spec.name, version, correlation, client_id) == ("ApiVersionsRequest", 5, 42, "fleetwatch-probe")
    assert body == API_VERSIONS_V5


def test_api_versions_v5_without_identity_sends_null_and_minus_one():
    body = encode_body("ApiVersionsRequest", 5, {"ClientSoftwareName": "a", "ClientSoftwareVersion": "1"})
    assert body == compact_string("a") + compact_string("1") + compact_string(None) + i32(-1) + NO_TAGS


def test_api_versions_v5_request_without_identity_decodes_to_the_defaults():
    raw = (compact_string("a") + compact_string("1")
           + b"\x00"              # ClusterId: compact nullable string, 0 = null
           + b"\xff\xff\xff\xff"  # NodeId: int32 -1
           + b"\x00")             # no tagged fields
    frame = framed(i16(18) + i16(5) + i32(3) + i16(1) + b"p" + b"\x00" + raw)
    spec, version, correlation, client_id, body = decode_request(frame[4:])
    assert (spec.name, version, correlation, client_id) == ("ApiVersionsRequest", 5, 3, "p")
    assert body == {"ClientSoftwareName": "a", "ClientSoftwareVersion": "1", "ClusterId": None, "NodeId": -1}
    # before v5 neither field is on the wire, whatever the values say
    assert encode_body("ApiVersionsRequest", 4, body) == compact_string("a") + compact_string("1") + NO_TAGS


def test_api_versions_v5_request_matches_kafka_python_v4_plus_the_kip_1242_fields():
    from kafka.protocol.metadata.api_versions import ApiVersionsRequest

    v4 = ApiVersionsRequest(version=4, client_software_name="fleetwatch", client_software_version="0.1.0").encode()
    assert v4[:-1] + compact_string(CLUSTER_ID) + i32(1) + NO_TAGS == API_VERSIONS_V5_BODY
    for version in (3, 4):
        ours = encode_body("ApiVersionsRequest", version, API_VERSIONS_V5)  # v5 fields are not on the wire
        theirs = ApiVersionsRequest(version=version, client_software_name="fleetwatch",
                                    client_software_version="0.1.0").encode()
        assert ours == theirs


def test_api_versions_v5_response_rebootstrap_required():
    # Header v0 (ApiVersions never uses the flexible response header), body v5 with error 129.
    payload = i32(9) + i16(129) + compact_array([]) + i32(0) + NO_TAGS
    correlation, body = decode_response("ApiVersionsResponse", 5, payload)
    assert correlation == 9
    assert body["ErrorCode"] == 129 and body["ApiKeys"] == []
    assert error_name(body["ErrorCode"]) == "REBOOTSTRAP_REQUIRED"
    assert encode_response("ApiVersionsResponse", 5, 9, {"ErrorCode": 129, "ApiKeys": []}) == framed(payload)


def test_api_versions_v5_response_table_and_tagged_fields():
    key = i16(18) + i16(0) + i16(5) + NO_TAGS
    tags = (uvarint(2)                              # two tagged fields
            + uvarint(1) + uvarint(8) + i64(77)     # tag 1: FinalizedFeaturesEpoch
            + uvarint(9) + uvarint(3) + b"abc")     # tag 9: unknown to us, skipped
    payload = i32(3) + i16(0) + compact_array([key]) + i32(0) + tags
    _, body = decode_response("ApiVersionsResponse", 5, payload)
    assert body["ApiKeys"] == [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 5}]
    assert body["FinalizedFeaturesEpoch"] == 77
    assert body["SupportedFeatures"] == [] and body["ZkMigrationReady"] is False


def test_api_versions_v5_response_body_is_the_v4_body():
    key = i16(60) + i16(0) + i16(2) + NO_TAGS
    raw = i16(0) + compact_array([key]) + i32(0) + NO_TAGS  # ErrorCode, ApiKeys, ThrottleTimeMs, tags
    v4, v5 = decode_body("ApiVersionsResponse", 4, raw), decode_body("ApiVersionsResponse", 5, raw)
    assert v4 == v5
    assert v5["ApiKeys"] == [{"ApiKey": 60, "MinVersion": 0, "MaxVersion": 2}]
    assert encode_body("ApiVersionsResponse", 5, v5) == encode_body("ApiVersionsResponse", 4, v4) == raw


def test_api_versions_unsupported_version_answer_is_read_as_v0():
    # KIP-511: an older broker answers a too-new ApiVersions with error 35 in a v0 body.
    payload = i32(1) + i16(35) + i32(1) + i16(18) + i16(0) + i16(2)
    _, body = decode_response("ApiVersionsResponse", 3, payload)
    assert body["ErrorCode"] == 35
    assert body["ApiKeys"] == [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 2}]


def test_api_versions_response_against_kafka_python():
    from kafka.protocol.metadata.api_versions import ApiVersionsResponse

    values = {"ErrorCode": 0, "ThrottleTimeMs": 5, "FinalizedFeaturesEpoch": 12,
              "ApiKeys": [{"ApiKey": 3, "MinVersion": 0, "MaxVersion": 13},
                          {"ApiKey": 60, "MinVersion": 0, "MaxVersion": 2}],
              "SupportedFeatures": [{"Name": "metadata.version", "MinVersion": 1, "MaxVersion": 27}]}
    for version in (0, 1, 3, 4):
        theirs = ApiVersionsResponse.decode(encode_body("ApiVersionsResponse", version, values), version=version)
        assert_same(values, theirs.to_dict(), version, "ApiVersionsResponse")


# ------------------------------------------------------------------ DescribeCluster v2 (KIP-1073)

DESCRIBE_CLUSTER_V2_REQUEST_BODY = (
    boolean(False)   # IncludeClusterAuthorizedOperations
    + i8(1)          # EndpointType (1+): brokers
    + boolean(True)  # IncludeFencedBrokers (2+)
    + NO_TAGS
)


def describe_cluster_broker(broker_id: int, host: str, port: int, rack: str | None, fenced: bool) -> bytes:
    return i32(broker_id) + compact_string(host) + i32(port) + compact_string(rack) + boolean(fenced) + NO_TAGS


DESCRIBE_CLUSTER_V2_RESPONSE_BODY = (
    i32(0)                              # ThrottleTimeMs
    + i16(0)                            # ErrorCode
    + compact_string(None)              # ErrorMessage
    + i8(1)                             # EndpointType
    + compact_string(CLUSTER_ID)        # ClusterId
    + i32(2)                            # ControllerId
    + compact_array([describe_cluster_broker(1, "b1.pay", 9092, "a", False),
                     describe_cluster_broker(2, "b2.pay", 9092, None, True)])
    + i32(-2147483648)                  # ClusterAuthorizedOperations
    + NO_TAGS
)


def test_describe_cluster_v2_request_bytes():
    values = {"IncludeClusterAuthorizedOperations": False, "EndpointType": 1, "IncludeFencedBrokers": True}
    assert encode_body("DescribeClusterRequest", 2, values) == DESCRIBE_CLUSTER_V2_REQUEST_BODY
    frame = encode_request("DescribeClusterRequest", 2, 7, "x", values)
    assert frame == framed(request_header_v2(60, 2, 7, "x") + DESCRIBE_CLUSTER_V2_REQUEST_BODY)

    from kafka.protocol.admin.cluster import DescribeClusterRequest

    theirs = DescribeClusterRequest(version=2, include_cluster_authorized_operations=False, endpoint_type=1,
                                    include_fenced_brokers=True)
    theirs.with_header(correlation_id=7, client_id="x")
    assert theirs.encode(header=True, framed=True) == frame


def test_describe_cluster_v2_request_decodes():
    frame = framed(request_header_v2(60, 2, 8, "y") + DESCRIBE_CLUSTER_V2_REQUEST_BODY)
    spec, version, correlation, client_id, body = decode_request(frame[4:])
    assert (spec.name, version, correlation, client_id) == ("DescribeClusterRequest", 2, 8, "y")
    assert body == {"IncludeClusterAuthorizedOperations": False, "EndpointType": 1, "IncludeFencedBrokers": True}


def test_describe_cluster_v2_response_bytes():
    payload = i32(5) + NO_TAGS + DESCRIBE_CLUSTER_V2_RESPONSE_BODY  # response header v1: flexible
    correlation, body = decode_response("DescribeClusterResponse", 2, payload)
    assert correlation == 5
    assert body["ClusterId"] == CLUSTER_ID and body["ControllerId"] == 2 and body["ErrorMessage"] is None
    assert body["Brokers"] == [
        {"BrokerId": 1, "Host": "b1.pay", "Port": 9092, "Rack": "a", "IsFenced": False},
        {"BrokerId": 2, "Host": "b2.pay", "Port": 9092, "Rack": None, "IsFenced": True},
    ]
    assert encode_body("DescribeClusterResponse", 2, body) == DESCRIBE_CLUSTER_V2_RESPONSE_BODY

    from kafka.protocol.admin.cluster import DescribeClusterResponse

    theirs = DescribeClusterResponse.decode(DESCRIBE_CLUSTER_V2_RESPONSE_BODY, version=2).to_dict()
    assert_same(body, theirs, 2, "DescribeClusterResponse", skip={"ClusterAuthorizedOperations"})


def test_describe_cluster_v1_has_no_fenced_flag():
    body = {"ClusterId": "c", "ControllerId": 1,
            "Brokers": [{"BrokerId": 1, "Host": "h", "Port": 1, "Rack": None, "IsFenced": True}]}
    raw = encode_body("DescribeClusterResponse", 1, body)
    decoded = decode_body("DescribeClusterResponse", 1, raw)
    assert decoded["Brokers"][0]["IsFenced"] is False  # not on the wire before v2: its default


# ------------------------------------------------------------------ DescribeQuorum v1 (KIP-836)

METADATA_LOG = "__cluster_metadata"
DESCRIBE_QUORUM_V1_REQUEST_BODY = (
    compact_array([                                   # Topics
        compact_string(METADATA_LOG)                  # TopicName
        + compact_array([i32(0) + NO_TAGS])           # Partitions: PartitionIndex
        + NO_TAGS
    ])
    + NO_TAGS
)


def replica_state_v1(replica: int, log_end: int, last_fetch: int, last_caught_up: int) -> bytes:
    return i32(replica) + i64(log_end) + i64(last_fetch) + i64(last_caught_up) + NO_TAGS


def describe_quorum_v1_response(partition_tags: bytes = NO_TAGS) -> bytes:
    return (
        i16(0)                                        # ErrorCode
        + compact_array([
            compact_string(METADATA_LOG)              # TopicName
            + compact_array([
                i32(0)                                # PartitionIndex
                + i16(0)                              # ErrorCode
                + i32(3001)                           # LeaderId
                + i32(7)                              # LeaderEpoch
                + i64(1234)                           # HighWatermark
                + compact_array([replica_state_v1(3001, 1234, -1, 1_764_000_000_900)])   # CurrentVoters
                + compact_array([replica_state_v1(1, 1234, 1_764_000_000_500, 1_764_000_000_500),
                                 replica_state_v1(2, 1200, 1_763_999_990_000, 1_763_999_980_000)])  # Observers
                + partition_tags
            ])
            + NO_TAGS
        ])
        + NO_TAGS
    )


DESCRIBE_QUORUM_V1_RESPONSE_BODY = describe_quorum_v1_response()


def test_describe_quorum_v1_request_bytes():
    values = {"Topics": [{"TopicName": METADATA_LOG, "Partitions": [{"PartitionIndex": 0}]}]}
    assert encode_body("DescribeQuorumRequest", 1, values) == DESCRIBE_QUORUM_V1_REQUEST_BODY

    from kafka.protocol.admin.cluster import DescribeQuorumRequest as Q

    theirs = Q(version=1, topics=[Q.TopicData(topic_name=METADATA_LOG,
                                              partitions=[Q.TopicData.PartitionData(partition_index=0)])])
    assert theirs.encode() == DESCRIBE_QUORUM_V1_REQUEST_BODY


def test_describe_quorum_v1_response_bytes():
    body = decode_body("DescribeQuorumResponse", 1, DESCRIBE_QUORUM_V1_RESPONSE_BODY)
    partition = body["Topics"][0]["Partitions"][0]
    assert (partition["LeaderId"], partition["LeaderEpoch"], partition["HighWatermark"]) == (3001, 7, 1234)
    assert [(o["ReplicaId"], o["LogEndOffset"], o["LastFetchTimestamp"]) for o in partition["Observers"]] == [
        (1, 1234, 1_764_000_000_500), (2, 1200, 1_763_999_990_000)]
    assert partition["CurrentVoters"][0]["LastFetchTimestamp"] == -1
    assert encode_body("DescribeQuorumResponse", 1, body) == DESCRIBE_QUORUM_V1_RESPONSE_BODY

    from kafka.protocol.admin.cluster import DescribeQuorumResponse

    theirs = DescribeQuorumResponse.decode(DESCRIBE_QUORUM_V1_RESPONSE_BODY, version=1).to_dict()
    assert_same(body, theirs, 1, "DescribeQuorumResponse")


def test_describe_quorum_v1_response_frame_has_the_flexible_header():
    payload = i32(11) + NO_TAGS + DESCRIBE_QUORUM_V1_RESPONSE_BODY  # response header v1
    correlation, body = decode_response("DescribeQuorumResponse", 1, payload)
    assert correlation == 11
    assert body == decode_body("DescribeQuorumResponse", 1, DESCRIBE_QUORUM_V1_RESPONSE_BODY)
    assert encode_response("DescribeQuorumResponse", 1, 11, body) == framed(payload)


def test_describe_quorum_v1_skips_a_tagged_field_it_does_not_know():
    # An early KIP-836 draft of the JSON had PartitionData.HighWatermarkUpdateTimeMs as tag 0
    # (int64, taggedVersions 1+); the published spec has no tag there. Either way it is skipped.
    tagged = uvarint(1) + uvarint(0) + uvarint(8) + i64(1_764_000_000_777)
    body = decode_body("DescribeQuorumResponse", 1, describe_quorum_v1_response(tagged))
    assert body == decode_body("DescribeQuorumResponse", 1, DESCRIBE_QUORUM_V1_RESPONSE_BODY)


def test_describe_quorum_v0_has_no_timestamps():
    v0 = encode_body("DescribeQuorumResponse", 0, decode_body("DescribeQuorumResponse", 1,
                                                                DESCRIBE_QUORUM_V1_RESPONSE_BODY))
    assert len(v0) == len(DESCRIBE_QUORUM_V1_RESPONSE_BODY) - 3 * 16  # two int64 less per replica state
    observers = decode_body("DescribeQuorumResponse", 0, v0)["Topics"][0]["Partitions"][0]["Observers"]
    assert {o["LastFetchTimestamp"] for o in observers} == {-1}  # the spec default


# ------------------------------------------------------------------ Metadata, against kafka-python

@pytest.mark.parametrize("version", [1, 2, 7, 9, 12, 13])
def test_metadata_against_kafka_python(version):
    from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

    request = {"Topics": [], "AllowAutoTopicCreation": False, "IncludeClusterAuthorizedOperations": False,
               "IncludeTopicAuthorizedOperations": False}
    theirs = MetadataRequest(version=version, topics=[], allow_auto_topic_creation=False,
                             include_cluster_authorized_operations=False,
                             include_topic_authorized_operations=False)
    assert encode_body("MetadataRequest", version, request) == theirs.encode()
    response = {"ThrottleTimeMs": 0, "ClusterId": CLUSTER_ID, "ControllerId": 2,
                "Brokers": [{"NodeId": 1, "Host": "b1.pay", "Port": 9092, "Rack": "a"},
                            {"NodeId": 2, "Host": "b2.pay", "Port": 9093, "Rack": None}],
                "Topics": [{"ErrorCode": 0, "Name": "t", "TopicId": "AAAAAAAAAAAAAAAAAAAAAA", "IsInternal": False,
                            "Partitions": [{"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 1, "LeaderEpoch": 3,
                                            "ReplicaNodes": [1, 2], "IsrNodes": [1], "OfflineReplicas": [2]}],
                            "TopicAuthorizedOperations": -2147483648}]}
    decoded = MetadataResponse.decode(encode_body("MetadataResponse", version, response), version=version).to_dict()
    assert [(b["node_id"], b["host"], b["port"]) for b in decoded["brokers"]] == [(1, "b1.pay", 9092),
                                                                                  (2, "b2.pay", 9093)]
    if version >= 2:
        assert decoded["cluster_id"] == CLUSTER_ID
    assert decoded["controller_id"] == 2
    assert decoded["topics"][0]["partitions"][0]["isr_nodes"] == [1]


def test_trailing_bytes_and_truncation_are_errors():
    with pytest.raises(DecodeError):
        decode_body("DescribeClusterResponse", 2, DESCRIBE_CLUSTER_V2_RESPONSE_BODY + b"\x00")
    with pytest.raises(DecodeError):
        decode_body("DescribeClusterResponse", 2, DESCRIBE_CLUSTER_V2_RESPONSE_BODY[:-5])


# ------------------------------------------------------------------ SASL SCRAM, RFC 7677 test vector

def test_scram_sha_256_rfc_7677_vector():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert client.final_message(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


# ------------------------------------------------------------------ helpers

def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def assert_same(ours: dict[str, Any], theirs: dict[str, Any], version: int, message: str,
                skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Every field of `ours` that exists at `version` equals kafka-python's decoding of it."""
    from streaming.collect.protocol.codec import spec

    def compare(fields: tuple, mine: dict[str, Any], other: dict[str, Any], path: str) -> None:
        for f in fields:
            if f.name in skip or f.name not in mine or not (f.present(version) or f.is_tagged(version)):
                continue
            key = _snake(f.name)
            assert key in other, f"{path}{f.name} missing in kafka-python's decoding"
            a, b = mine[f.name], other[key]
            if f.struct and f.array:
                assert len(a) == len(b), f"{path}{f.name}"
                for i, (x, y) in enumerate(zip(a, b, strict=True)):
                    compare(f.fields, x, y, f"{path}{f.name}[{i}].")
            else:
                assert a == b, f"{path}{f.name}: {a!r} != {b!r}"

    compare(spec(message).fields, ours, theirs, "")
