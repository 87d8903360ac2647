"""Real Kafka bytes in the fast suite: the codec and the probe against what Apache Kafka really sent.

The fixtures under tests/fixtures/kafka/ are exchanges recorded from real Kafka 4.4.0 (a separate
quorum of 3 controllers with 2 brokers, healthy and with a broker frozen until fenced; a combined
node) and 4.3.1 (a combined node, no ApiVersions v5) by tests/fixtures/kafka/record.py. Each holds
the exact request and response frames and `expect`: what the answer must say, known without our
decoder (from the harness, the controllers' quorum-state files, the clock and Kafka's KIPs).

No broker runs here, except in the `real_kafka` test at the end, which records again against a
live 4.4 cluster and checks that the stored fixtures still describe what Kafka answers.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from streaming.collect.probe import ProbeOptions, Prober, Target, exchange, parse_address
from streaming.collect.protocol import Connection, KafkaErrorResponse
from streaming.collect.protocol.codec import (
    API_VERSIONS_KEY,
    UNSUPPORTED_VERSION,
    decode_body,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    spec,
)
from streaming.records.contract import Expected, event_from_dict, event_to_dict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kafka"
RECORDED = sorted(FIXTURES.glob("4.*/*.json"))
METADATA_LOG = "__cluster_metadata"
# The software fields name our client, not the request: a version bump must not break the replay.
_SOFTWARE_FIELDS = ("ClientSoftwareName", "ClientSoftwareVersion")


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def fixture(kafka: str, name: str) -> dict[str, Any]:
    return load(FIXTURES / kafka / f"{name}.json")


def _ids(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


# ---------------------------------------------------------------- reading one recorded answer


def answered_version(fx: dict[str, Any]) -> int:
    """The version of the response body: a broker refusing an ApiVersions version answers in v0 (KIP-511)."""
    payload = bytes.fromhex(fx["response_hex"])[4:]
    if fx["api"] == "ApiVersions" and int.from_bytes(payload[4:6], "big", signed=True) == UNSUPPORTED_VERSION:
        return 0
    return fx["version"]


def decoded(fx: dict[str, Any]) -> dict[str, Any]:
    """The response body as the project's codec reads it (`decode_response`, as the client does)."""
    correlation, body = decode_response(f"{fx['api']}Response", fx["version"], bytes.fromhex(fx["response_hex"])[4:])
    assert correlation == fx["correlation_id"]
    return body


def _partition(body: dict[str, Any]) -> dict[str, Any]:
    (topic,) = body["Topics"]
    assert topic["TopicName"] == METADATA_LOG
    (partition,) = topic["Partitions"]
    return partition


def _broker_ids(api: str, body: dict[str, Any]) -> list[int]:
    return sorted(b["NodeId" if api == "Metadata" else "BrokerId"] for b in body["Brokers"])


def mismatches(fx: dict[str, Any]) -> list[str]:
    """Every fact of `expect` that the decoded answer contradicts (empty: it says what Kafka meant)."""
    expect, api = fx["expect"], fx["api"]
    if "no_answer_within_s" in expect:
        return [] if fx["response_hex"] is None else ["a frozen broker answered"]
    body = decoded(fx)
    out = []

    def same(fact: str, seen: Any) -> None:
        if seen != expect[fact]:
            out.append(f"{fact}: expected {expect[fact]!r}, decoded {seen!r}")

    table = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in body.get("ApiKeys") or ()}
    for fact in expect:
        if fact == "error_code":
            same(fact, body["ErrorCode"])
        elif fact == "api_versions_max":
            same(fact, table.get(API_VERSIONS_KEY, (None, None))[1])
        elif fact == "offers":
            same(fact, [k for k in expect[fact] if k in table])
        elif fact == "lacks":
            same(fact, [k for k in expect[fact] if k not in table])
        elif fact in ("cluster_id", "controller_id", "endpoint_type"):
            same(fact, body[{"cluster_id": "ClusterId", "controller_id": "ControllerId",
                             "endpoint_type": "EndpointType"}[fact]])
        elif fact == "controller_id_in":
            if body["ControllerId"] not in expect[fact]:
                out.append(f"controller_id: decoded {body['ControllerId']}, not one of {expect[fact]}")
        elif fact == "broker_ids":
            same(fact, _broker_ids(api, body))
        elif fact == "fenced":
            same(fact, {str(b["BrokerId"]): b["IsFenced"] for b in body["Brokers"]})
        elif fact == "partition_error_code":
            same(fact, _partition(body)["ErrorCode"])
        elif fact == "leader_id":
            same(fact, _partition(body)["LeaderId"])
        elif fact in ("voters", "observers"):
            replicas = _partition(body)["CurrentVoters" if fact == "voters" else "Observers"]
            same(fact, sorted(r["ReplicaId"] for r in replicas))
        elif fact == "fetched_between":
            partition = _partition(body)
            fetched = {str(r["ReplicaId"]): r["LastFetchTimestamp"]
                       for r in partition["CurrentVoters"] + partition["Observers"]}
            for replica, (low, high) in expect[fact].items():
                if not low <= fetched.get(replica, -1) <= high:
                    out.append(f"replica {replica} last fetched at {fetched.get(replica)}, not in [{low}, {high}]")
        else:
            out.append(f"unknown fact {fact!r} in the fixture")
    return out


# ---------------------------------------------------------------- the fixture set


def test_the_fixture_set_holds_every_exchange_the_issue_names_and_stays_small():
    names = {_ids(p) for p in RECORDED}
    wanted = {f"4.4.0/separate-healthy-b1-ApiVersions-v{v}" for v in range(6)} | {
        "4.4.0/separate-healthy-b1-ApiVersions-v5-identity",
        "4.4.0/separate-healthy-b1-ApiVersions-v5-other-cluster",
        "4.4.0/separate-healthy-b1-ApiVersions-v5-other-node",
        "4.4.0/separate-healthy-b1-ApiVersions-v5-node-without-cluster",
        "4.4.0/separate-healthy-b1-Metadata-v13",
        "4.4.0/separate-healthy-b1-DescribeCluster-v0", "4.4.0/separate-healthy-b1-DescribeCluster-v1",
        "4.4.0/separate-healthy-b1-DescribeCluster-v2", "4.4.0/separate-fenced-b1-DescribeCluster-v2",
        "4.4.0/separate-healthy-b1-DescribeQuorum-v2", "4.4.0/separate-healthy-leader-DescribeQuorum-v2",
        "4.4.0/separate-healthy-follower-DescribeQuorum-v2", "4.4.0/separate-healthy-leader-DescribeCluster-v2",
        "4.4.0/combined-healthy-n1-DescribeQuorum-v2", "4.3.1/combined-healthy-n1-ApiVersions-v5-identity",
    }
    assert wanted - names == set()
    assert sum(p.stat().st_size for p in RECORDED) < 80 * 1024


# ---------------------------------------------------------------- codec against real bytes


@pytest.mark.parametrize("path", RECORDED, ids=_ids)
def test_every_request_is_what_our_encoder_writes_today(path):
    # These bytes were accepted by real Kafka: the encoder must not drift from them.
    fx = load(path)
    frame = encode_request(f"{fx['api']}Request", fx["version"], fx["correlation_id"], fx["client_id"], fx["request"])
    assert frame.hex() == fx["request_hex"]


@pytest.mark.parametrize("path", [p for p in RECORDED if load(p)["response_hex"] is not None], ids=_ids)
def test_every_response_decodes_to_what_kafka_said(path):
    fx = load(path)
    assert mismatches(fx) == []


@pytest.mark.parametrize("path", [p for p in RECORDED if load(p)["response_hex"] is not None], ids=_ids)
def test_every_response_is_read_whole_at_its_version(path):
    # Strictly at the version Kafka answered (no ApiVersions fallback, no trailing byte), and
    # re-encoded it gives Kafka's bytes back: no field or tagged field was skipped or misplaced.
    fx = load(path)
    frame = bytes.fromhex(fx["response_hex"])
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    version = answered_version(fx)
    header = 4 if fx["api"] == "ApiVersions" or not spec(f"{fx['api']}Response").is_flexible(version) else 5
    body = decode_body(f"{fx['api']}Response", version, frame[4 + header:])
    assert body == decoded(fx)
    assert encode_response(f"{fx['api']}Response", version, fx["correlation_id"], body) == frame


def test_kafka_4_3_answers_v5_with_unsupported_version_and_its_own_range():
    fx = fixture("4.3.1", "combined-healthy-n1-ApiVersions-v5-identity")
    body = decoded(fx)
    assert body["ErrorCode"] == UNSUPPORTED_VERSION
    assert [(k["ApiKey"], k["MinVersion"], k["MaxVersion"]) for k in body["ApiKeys"]] == [(API_VERSIONS_KEY, 0, 4)]


# ---------------------------------------------------------------- the probe on replayed answers


class _Replay:
    """Recorded answers, served to the project's client in place of a socket.

    A request is answered with the recording made for the same address, api, version and
    values (ignoring the correlation id, rewritten, and the client software fields); a
    recording without a response is a broker that never answers; a request nobody recorded
    closes the connection (and is listed in `unrecorded`).
    """

    def __init__(self, fixtures: list[dict[str, Any]]) -> None:
        self.answers: dict[tuple[str, int, int, str], dict[str, Any]] = {}
        for fx in fixtures:
            self.answers[self._key(fx["to"]["address"], bytes.fromhex(fx["request_hex"]))] = fx
        self.sent: list[tuple[str, str, int]] = []
        self.unrecorded: list[tuple[str, str, int]] = []

    @staticmethod
    def _key(address: str, frame: bytes) -> tuple[str, int, int, str]:
        msg, version, _, _, values = decode_request(frame[4:])
        values = {k: v for k, v in values.items() if k not in _SOFTWARE_FIELDS}
        return address, msg.api_key, version, json.dumps(values, sort_keys=True)

    def connection_class(self) -> type[Connection]:
        replay = self

        class ReplayConnection(Connection):
            async def open(self) -> None:
                self._reader = asyncio.StreamReader()
                self._writer = _ReplayWriter(replay, f"{self.host}:{self.port}", self._reader)  # type: ignore[assignment]

        return ReplayConnection

    def open(self, address: str) -> Connection:
        host, port = parse_address(address)
        return self.connection_class()(host, port, deadline=asyncio.get_running_loop().time() + 1,
                                       client_id="fleetwatch-probe")


class _ReplayWriter:
    def __init__(self, replay: _Replay, address: str, reader: asyncio.StreamReader) -> None:
        self.replay, self.address, self.reader = replay, address, reader
        self.transport = self

    def write(self, frame: bytes) -> None:
        key = self.replay._key(self.address, frame)
        what = (self.address, decode_request(frame[4:])[0].name, key[2])
        self.replay.sent.append(what)
        fx = self.replay.answers.get(key)
        if fx is None:
            self.replay.unrecorded.append(what)
            self.reader.feed_eof()
        elif fx["response_hex"] is not None:
            response = bytes.fromhex(fx["response_hex"])
            self.reader.feed_data(response[:4] + frame[8:12] + response[8:])  # our correlation id

    async def drain(self) -> None:
        return None

    def abort(self) -> None:
        return None


def scenario(kafka: str, layout: str, name: str) -> list[dict[str, Any]]:
    return [load(p) for p in sorted((FIXTURES / kafka).glob(f"{layout}-{name}-*.json"))]


def probe_round(fixtures: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], _Replay]:
    """One probe round over the recorded cluster, bootstrapped at its first broker."""
    replay = _Replay(fixtures)
    first = fixtures[0]["cluster"]["brokers"][0]
    address = next(f["to"]["address"] for f in fixtures if f["to"]["node_id"] == first)
    target = Target(name="real", bootstrap=(parse_address(address),))
    # The round starts when the recording did: event times must be real ones (the contract refuses
    # a `ts` before 2000), and the leader's own heartbeat is the time of its answer.
    started_ms = min(f["recorded_at_ms"][0] for f in fixtures)
    prober = Prober([target], ProbeOptions(timeout_ms=300, source="fixtures"), connection=replay.connection_class())
    events = prober.probe_round(now_ms=started_ms)
    return events, replay


def by_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def answers(events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The bootstrap's metadata_response, and the endpoints' in node order (they run concurrently)."""
    responses = by_type(events, "metadata_response")
    boot = [r for r in responses if r["expected"] is None]
    assert len(boot) == 1
    return boot[0], sorted((r for r in responses if r["expected"] is not None), key=lambda r: r["expected"]["node_id"])


def fetch_windows(fixtures: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Per replica, the span of the recorded last-fetch windows over the scenario's DescribeQuorum answers."""
    out: dict[int, tuple[int, int]] = {}
    for fx in fixtures:
        for replica, (low, high) in fx["expect"].get("fetched_between", {}).items():
            known = out.get(int(replica), (low, high))
            out[int(replica)] = (min(known[0], low), max(known[1], high))
    return out


@pytest.mark.parametrize(("kafka", "layout", "name"), [("4.4.0", "separate", "healthy"),
                                                      ("4.4.0", "separate", "fenced"),
                                                      ("4.3.1", "combined", "healthy")])
def test_probe_events_are_the_wire_form_of_contract_records(kafka, layout, name):
    # One way from a record to the wire (contract.event_to_dict): every contract field, null when
    # unknown, in the contract's order; a failed exchange adds its error_detail after them.
    events, _ = probe_round(scenario(kafka, layout, name))
    assert {ev["type"] for ev in events} >= {"metadata_response", "broker_heartbeat"}
    for ev in events:
        wire = event_to_dict(event_from_dict(ev))
        assert {k: v for k, v in ev.items() if k != "error_detail"} == wire
        assert list(ev)[:len(wire)] == list(wire) and list(ev)[len(wire):] in ([], ["error_detail"])


def test_the_probe_reads_a_healthy_separate_quorum():
    fixtures = scenario("4.4.0", "separate", "healthy")
    cluster = fixtures[0]["cluster"]
    events, replay = probe_round(fixtures)
    assert replay.unrecorded == []
    boot, endpoints = answers(events)
    assert [(r["expected"], r["error"]) for r in [boot, *endpoints]] == [(None, None)] + [
        ({"cluster_id": cluster["id"], "node_id": b}, None) for b in cluster["brokers"]]
    quorum = _partition(decoded(next(f for f in fixtures if f["api"] == "DescribeQuorum")))
    for response in [boot, *endpoints]:
        # The active controller from DescribeQuorum, never Metadata's random live broker, with its epoch.
        assert (response["cluster_id"], response["controller_id"]) == (cluster["id"], cluster["leader"])
        assert response["controller_epoch"] == quorum["LeaderEpoch"] >= 1
    assert [(b["node_id"], b["fenced"]) for b in boot["brokers"]] == [(b, False) for b in cluster["brokers"]]
    assert [e["responder_node_id"] for e in endpoints] == cluster["brokers"]  # confirmed by KIP-1242
    assert sum(1 for s in replay.sent if s[1:] == ("ApiVersionsRequest", 5)) == len(cluster["brokers"])
    assert [(s["broker_id"], s["state"]) for s in by_type(events, "broker_state")] == [
        (b, "ONLINE") for b in cluster["brokers"]]
    # Heartbeats: the observers (the brokers), not the controllers (voters that are not brokers).
    heartbeats = by_type(events, "broker_heartbeat")
    assert sorted(h["broker_id"] for h in heartbeats) == cluster["brokers"]
    windows = fetch_windows(fixtures)
    for beat in heartbeats:
        low, high = windows[beat["broker_id"]]
        assert low <= beat["ts"] <= high


def test_the_probe_reads_a_broker_that_kafka_fenced():
    fixtures = scenario("4.4.0", "separate", "fenced")
    cluster = fixtures[0]["cluster"]
    assert cluster["fenced"] == [2]
    events, replay = probe_round(fixtures)
    assert replay.unrecorded == []
    boot, endpoints = answers(events)
    assert [(b["node_id"], b["fenced"]) for b in boot["brokers"]] == [(1, False), (2, True)]
    assert [(e["expected"]["node_id"], e["error"]) for e in endpoints] == [(1, None), (2, "TIMEOUT")]
    assert [(s["broker_id"], s["state"]) for s in by_type(events, "broker_state")] == [(1, "ONLINE"), (2, "FENCED")]
    # The frozen broker's last fetch is from before it was frozen: an old heartbeat, not a new one.
    beats = {h["broker_id"]: h["ts"] for h in by_type(events, "broker_heartbeat")}
    windows = fetch_windows(fixtures)
    assert sorted(beats) == [1, 2]
    assert all(windows[b][0] <= ts <= windows[b][1] for b, ts in beats.items())
    assert windows[2][1] < min(fx["recorded_at_ms"][0] for fx in fixtures if fx["api"] == "DescribeQuorum")


def test_the_probe_hears_a_combined_node_as_a_voter():
    # Combined layout: every node is a voter and DescribeQuorum lists no observers (real 4.4 bytes).
    fixtures = scenario("4.4.0", "combined", "healthy")
    quorum = decoded(next(f for f in fixtures if f["api"] == "DescribeQuorum"))
    assert _partition(quorum)["Observers"] == []
    events, replay = probe_round(fixtures)
    assert replay.unrecorded == []
    assert [h["broker_id"] for h in by_type(events, "broker_heartbeat")] == [1]
    assert [r["controller_id"] for r in by_type(events, "metadata_response")] == [1, 1]


def test_the_probe_falls_back_to_the_reported_cluster_id_on_kafka_4_3():
    fixtures = scenario("4.3.1", "combined", "healthy")
    cluster = fixtures[0]["cluster"]
    events, replay = probe_round(fixtures)
    assert replay.unrecorded == []
    assert not [s for s in replay.sent if s[1:] == ("ApiVersionsRequest", 5)]  # 4.3 does not offer v5
    _, (endpoint,) = answers(events)
    assert (endpoint["error"], endpoint["cluster_id"], endpoint["responder_node_id"]) == (None, cluster["id"], 1)
    assert [h["broker_id"] for h in by_type(events, "broker_heartbeat")] == [1]


@pytest.mark.parametrize(("variant", "node", "code"), [
    ("other-cluster", 1, "REBOOTSTRAP_REQUIRED"), ("other-node", 2, "REBOOTSTRAP_REQUIRED")])
def test_a_misrouted_identity_check_is_refused_by_real_kafka(variant, node, code):
    fx = fixture("4.4.0", f"separate-healthy-b1-ApiVersions-v5-{variant}")
    replay = _Replay([fixture("4.4.0", "separate-healthy-b1-ApiVersions-v3"), fx])

    async def check() -> KafkaErrorResponse:
        conn = replay.open(fx["to"]["address"])
        await conn.open()
        await conn.negotiate()  # the broker's own table says it takes v5
        with pytest.raises(KafkaErrorResponse) as refused:
            # The probe's own check: a refusal is a misroute, not "cannot check".
            await exchange.check_identity(conn, Expected(fx["request"]["ClusterId"], node))
        return refused.value

    refused = asyncio.run(check())
    assert (refused.code, refused.error_code) == (code, 129)
    assert replay.unrecorded == []


def test_an_identity_check_kafka_cannot_take_turns_the_check_off():
    # INVALID_REQUEST (a ClusterId without a NodeId): the probe compares cluster ids instead, for a while.
    fx = fixture("4.4.0", "separate-healthy-b1-ApiVersions-v5-cluster-without-node")
    replay = _Replay([fixture("4.4.0", "separate-healthy-b1-ApiVersions-v3"), fx])

    async def check() -> None:
        conn = replay.open(fx["to"]["address"])
        await conn.open()
        await conn.negotiate()
        await exchange.check_identity(conn, Expected(fx["request"]["ClusterId"], -1))

    with pytest.raises(exchange.IdentityCheckUnusable) as unusable:
        asyncio.run(check())
    assert unusable.value.__cause__.error_code == 42  # type: ignore[union-attr]


@pytest.mark.parametrize(("pin", "bootstrap_checks"), [("cVem385wTi2sAqUvyy5Rlg", 1), ("AAAAAAAAAAAAAAAAAAAAAA", 0)])
def test_a_pinned_bootstrap_asks_for_the_pin_at_the_node_the_pinned_cluster_advertised_there(pin, bootstrap_checks):
    # Issue 31: round 1 learns that b1's address is node 1 of the cluster; from round 2 the bootstrap
    # asks for (pin, 1) by ApiVersions v5. A pin that cluster is not (its Metadata said another id)
    # has no node at the address: no v5 (Kafka refuses a ClusterId without a NodeId), the fallback.
    fixtures = scenario("4.4.0", "separate", "healthy")
    replay = _Replay(fixtures)
    address = next(f["to"]["address"] for f in fixtures if f["to"]["node_id"] == 1)
    target = Target(name="real", bootstrap=(parse_address(address),), expected_cluster_id=pin)
    prober = Prober([target], ProbeOptions(timeout_ms=300, source="fixtures"), connection=replay.connection_class())
    started_ms = min(f["recorded_at_ms"][0] for f in fixtures)
    for _ in range(2):
        replay.sent.clear()
        boot, endpoints = answers(prober.probe_round(now_ms=started_ms))
    assert replay.unrecorded == []
    assert sum(1 for s in replay.sent if s[1:] == ("ApiVersionsRequest", 5)) == len(endpoints) + bootstrap_checks
    assert (boot["expected"], boot["error"], boot["responder_node_id"]) == (None, None, 1)


# ---------------------------------------------------------------- the fixtures against live Kafka


def _recorder():
    path = FIXTURES / "record.py"
    module_spec = importlib.util.spec_from_file_location("kafka_fixture_recorder", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # dataclasses look their module up
    module_spec.loader.exec_module(module)
    return module


def shape(value: Any) -> Any:
    """The structure of a decoded body: field names, list lengths and value types, not values."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def error_codes(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [code for k, v in value.items() for code in ([v] if k == "ErrorCode" else error_codes(v))]
    if isinstance(value, list):
        return [code for v in value for code in error_codes(v)]
    return []


@pytest.mark.real_kafka
def test_the_stored_fixtures_still_describe_what_kafka_4_4_answers(tmp_path):
    recorder = _recorder()
    fresh = {_ids(p): load(p) for p in recorder.record(tmp_path / "fixtures", tmp_path / "work", ["4.4.0"])}
    stored = {_ids(p): load(p) for p in RECORDED if p.parent.name == "4.4.0"}
    assert sorted(fresh) == sorted(stored)
    for name, now in fresh.items():
        then = stored[name]
        assert mismatches(now) == [], name  # today's answer says what the recorder knew
        request = json.loads(json.dumps(now["request"]).replace(now["cluster"]["id"], then["cluster"]["id"]))
        assert (now["api"], now["version"], request) == (then["api"], then["version"], then["request"]), name
        if then["response_hex"] is None:
            assert now["response_hex"] is None, name
            continue
        body_now, body_then = decoded(now), decoded(then)
        assert shape(body_now) == shape(body_then), name
        assert error_codes(body_now) == error_codes(body_then), name
        assert len(now["response_hex"]) == len(then["response_hex"]), name
        if now["api"] == "ApiVersions":
            assert body_now["ApiKeys"] == body_then["ApiKeys"], name
            assert body_now["SupportedFeatures"] == body_then["SupportedFeatures"], name
