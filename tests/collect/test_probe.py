"""`fleetwatch probe` against real Tansu brokers on 127.0.0.1 (and a Kafka 4.4-like fake for the
requests Tansu does not speak), then the recorded events through the real Spark detectors.

Event time is driven explicitly: each round is probed at `T0 + k * 5000`, so the 30 s window of
`cluster.unreachable` needs no wall-clock waiting. Nothing waits on a fixed sleep: brokers are
polled until they answer, and killed ones are reaped before the next round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.probe_doubles import (
    HOST,
    Blackhole,
    FakeCluster,
    FakeKafka,
    Tansu,
    garbage_server,
    refused_port,
    responses,
    self_signed_cert,
    target,
    tls_terminator,
    valid,
)

from streaming.collect import probe
from streaming.collect.probe import ProbeOptions, Prober, Target, targets_from_config
from streaming.collect.protocol import Security
from streaming.config import ConfigError, FleetwatchConfig
from streaming.records.contract import event_from_dict

pytestmark = pytest.mark.broker

T0 = 1_764_000_000_000
ROUND_MS = 5000
ROUNDS = 12  # 3 healthy rounds, then 9 after the faults: > 30 s of errors + 5 s of watermark
FAULT_ROUND = 3
OPTIONS = ProbeOptions(timeout_ms=2000, source="probe-test")



@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    logs = tmp_path_factory.mktemp("tansu")
    victim = Tansu("victim-cluster", log_dir=logs).start()
    brokers = {
        "healthy": Tansu("healthy-cluster", log_dir=logs).start(),
        "victim": victim,
        # Listens on its own port but advertises the victim's: clients bootstrapped here are
        # sent to another cluster (the victim is not a probe target).
        "misrouted": Tansu("misrouted-cluster", advertised_port=victim.port, log_dir=logs).start(),
        "killed": Tansu("killed-cluster", log_dir=logs).start(),
        "idchange": Tansu("alpha-cluster", log_dir=logs).start(),
    }
    yield brokers
    for broker in brokers.values():
        broker.stop()


# ------------------------------------------------------------------ the scenario, then replay


def kraft_fakes(now: dict[str, int]) -> tuple[FakeCluster, list[FakeKafka]]:
    """kraft-cluster: node 1 (bootstrap), node 2 fenced but answering, and node 3 advertised at
    an address where a broker of other-cluster answers (a misroute that KIP-1242 catches)."""
    kraft = FakeCluster("kraft-cluster", last_fetch=lambda: {1: now["ms"] - 40, 2: now["ms"] - 60},
                        leader_clock=lambda: now["ms"])
    other = FakeCluster("other-cluster")
    node1, node2, stranger = FakeKafka(kraft, 1), FakeKafka(kraft, 2), FakeKafka(other, 7)
    return kraft, [node1, node2, stranger]


async def run_scenario(fleet: dict[str, Tansu], prober_targets: list[Target], fakes: list[FakeKafka],
                       now: dict[str, int]) -> list[dict[str, Any]]:
    prober = Prober(prober_targets, OPTIONS)
    events: list[dict[str, Any]] = []
    for k in range(ROUNDS):
        if k == FAULT_ROUND:
            fleet["killed"].kill()                           # a crash mid-run
            fleet["idchange"].stop()
            fleet["idchange"].start(cluster_id="beta-cluster")  # same port, another cluster id
        now["ms"] = T0 + k * ROUND_MS
        events += await prober.probe_round_async(now["ms"])
    return events


@pytest.mark.spark
def test_probe_then_replay_raises_the_right_alerts(fleet, spark, test_config, tmp_path):
    now = {"ms": T0}
    kraft, fakes = kraft_fakes(now)
    node1, node2, stranger = fakes

    async def scenario() -> list[dict[str, Any]]:
        for fake in fakes:
            await fake.start()
        kraft.brokers = [{"node_id": 1, "port": node1.port, "fenced": False},
                         {"node_id": 2, "port": node2.port, "fenced": True},
                         {"node_id": 3, "port": stranger.port, "fenced": False}]
        stranger.cluster.brokers = [{"node_id": 7, "port": stranger.port, "fenced": False}]
        targets = [target(name, fleet[name].address) for name in ("healthy", "misrouted", "killed", "idchange")]
        targets.append(target("kraft", f"{HOST}:{node1.port}"))
        try:
            return await run_scenario(fleet, targets, fakes, now)
        finally:
            for fake in fakes:
                await fake.stop()

    events = valid(asyncio.run(scenario()))
    healthy, victim = fleet["healthy"], fleet["victim"]

    # What the probe saw, before any rule runs.
    ok = responses(events, target="healthy")
    assert len(ok) == 2 * ROUNDS and all(ev["error"] is None for ev in ok)
    assert {(ev["cluster_id"], ev["responder_node_id"], ev["controller_id"]) for ev in ok} == {
        ("healthy-cluster", 111, 111)}
    assert [ev["expected"] for ev in ok if ev["expected"]] == [
        {"cluster_id": "healthy-cluster", "node_id": 111}] * ROUNDS
    wrong = responses(events, target="misrouted", endpoint=victim.address)
    assert wrong and {(ev["cluster_id"], ev["expected"]["cluster_id"]) for ev in wrong} == {
        ("victim-cluster", "misrouted-cluster")}
    dead = [ev for ev in responses(events, target="killed") if ev["ts"] >= T0 + FAULT_ROUND * ROUND_MS]
    assert {ev["error"] for ev in dead} == {"CONNECTION_REFUSED"}
    boots = [ev["cluster_id"] for ev in responses(events, target="idchange", expected=None)]
    assert boots == ["alpha-cluster"] * FAULT_ROUND + ["beta-cluster"] * (ROUNDS - FAULT_ROUND)
    # Tansu is only ever sent versions it advertises: it never dropped a connection on us.
    assert not [ev for ev in events if ev.get("error") in ("CONNECTION_CLOSED", "PROTOCOL_ERROR")]

    # The Kafka 4.4 fake: DescribeCluster v2 fencing, the quorum leader, KIP-1242, heartbeats.
    kraft_boot = responses(events, target="kraft", expected=None)[0]
    assert kraft_boot["controller_id"] == 3001  # DescribeQuorum's leader, not Metadata's random broker
    assert [(b["node_id"], b["fenced"]) for b in kraft_boot["brokers"]] == [(1, False), (2, True), (3, False)]
    rebootstrap = responses(events, target="kraft", endpoint=f"{HOST}:{stranger.port}")
    assert {ev["error"] for ev in rebootstrap} == {"REBOOTSTRAP_REQUIRED"}
    fenced_but_answering = responses(events, target="kraft", endpoint=f"{HOST}:{node2.port}")
    assert {(ev["error"], ev["responder_node_id"]) for ev in fenced_but_answering} == {(None, 2)}
    beats = [ev for ev in events if ev["type"] == "broker_heartbeat"]
    assert Counter(ev["broker_id"] for ev in beats) == {1: ROUNDS, 2: ROUNDS}
    assert all(ev["broker_epoch"] == -1 and ev["cluster_id"] == "kraft-cluster" for ev in beats)

    path = tmp_path / "probe-events.jsonl"
    path.write_text("".join(json.dumps(ev) + "\n" for ev in events))
    from streaming.job import replay_file

    summary = replay_file(path, tmp_path / "alerts.jsonl", test_config)
    assert sum(summary.quarantined.values()) == 0, summary.render()
    firing = [a for a in summary.alerts if a["status"] == "firing"]
    fired = {(a["rule"], a["target"] or a["cluster_id"], a["endpoint"], a["broker_id"]) for a in firing}
    print("\n" + summary.render())
    for a in firing:
        print(f"  {a['rule']:<24} target={a['target']} cluster={a['cluster_id']} endpoint={a['endpoint']} "
              f"broker={a['broker_id']} starts_at=T0+{a['starts_at'] - T0}")

    assert ("connection.misrouted", "misrouted", victim.address, None) in fired
    assert ("connection.misrouted", "kraft", f"{HOST}:{stranger.port}", None) in fired  # REBOOTSTRAP_REQUIRED
    assert ("cluster.id_changed", "idchange", fleet["idchange"].address, None) in fired
    unreachable = [a for a in firing if a["rule"] == "cluster.unreachable"]
    assert [a["target"] for a in unreachable] == ["killed"]
    first_error = min(ev["ts"] for ev in dead)
    assert unreachable[0]["starts_at"] == first_error + 30000
    assert ("broker.fenced", "kraft-cluster", None, 2) in {
        (a["rule"], a["cluster_id"], a["endpoint"], a["broker_id"]) for a in firing}
    # Nothing at all about the healthy cluster: its target, its endpoint, its cluster id.
    about_healthy = [a for a in summary.alerts if a["target"] == "healthy" or a["endpoint"] == healthy.address
                     or a["cluster_id"] == "healthy-cluster"]
    assert about_healthy == []
    # KRaft's random Metadata ControllerId never reached the rules.
    assert not [a for a in firing if a["rule"].startswith("cluster.controller") and a["cluster_id"] == "kraft-cluster"]


# ------------------------------------------------------------------ isolation and timeouts


def test_a_dead_or_slow_target_never_delays_the_others(fleet):
    hole = Blackhole()
    try:
        targets = [target("healthy", fleet["healthy"].address),
                   target("blackhole", f"{HOST}:{hole.port}"),
                   target("refused", f"{HOST}:{refused_port()}")]
        prober = Prober(targets, ProbeOptions(timeout_ms=1000, interval_ms=5000, source="probe-test"))
        emitted: list[tuple[float, str, list[dict[str, Any]]]] = []
        started = time.monotonic()

        def emit(events: list[dict[str, Any]]) -> None:
            answers = responses(valid(events))  # each exchange's answer is emitted as it completes
            if answers:
                emitted.append((time.monotonic() - started, answers[0]["target"], answers))

        asyncio.run(prober.run(emit, rounds=1))
        took = time.monotonic() - started
    finally:
        hole.close()
    when = {name: at for at, name, _ in reversed(emitted)}  # its first answer
    errors: dict[str, set[str | None]] = {}
    for _, name, evs in emitted:
        errors.setdefault(name, set()).update(ev["error"] for ev in evs)
    assert errors == {"healthy": {None}, "blackhole": {"TIMEOUT"}, "refused": {"CONNECTION_REFUSED"}}
    assert when["healthy"] < 0.5 and when["refused"] < 0.5  # published long before the blackhole gave up
    assert 1.0 <= when["blackhole"] < 1.5
    assert took < 1.5
    (blackhole_event,) = emitted[[name for _, name, _ in emitted].index("blackhole")][2]
    assert 1000 <= blackhole_event["latency_ms"] < 1300


def test_bootstrap_failover_and_sticky_preference(fleet):
    dead = f"{HOST}:{refused_port()}"
    prober = Prober([target("two", dead, fleet["healthy"].address)], OPTIONS)
    first = valid(prober.probe_round(T0))
    assert [(ev["endpoint"], ev["error"]) for ev in responses(first, expected=None)] == [
        (dead, "CONNECTION_REFUSED"), (fleet["healthy"].address, None)]
    second = prober.probe_round(T0 + ROUND_MS)  # starts with the address that answered
    assert [(ev["endpoint"], ev["error"]) for ev in responses(second, expected=None)] == [
        (fleet["healthy"].address, None)]


def test_endpoints_are_forgotten_after_forget_after_ms(fleet):
    stray = Tansu("stray-cluster", log_dir=Path(fleet["healthy"].log_dir)).start()
    prober = Prober([target("stray", stray.address, forget_after_ms=12000)], OPTIONS)
    try:
        valid(prober.probe_round(T0))
    finally:
        stray.kill()
    kept = responses(prober.probe_round(T0 + 10000), expected={"cluster_id": "stray-cluster", "node_id": 111})
    assert [ev["error"] for ev in kept] == ["CONNECTION_REFUSED"]  # still probed: last advertised 10 s ago
    later = responses(prober.probe_round(T0 + 15000))
    assert [ev["expected"] for ev in later] == [None]  # only the bootstrap is left


# ------------------------------------------------------------------ security


def test_tls_to_a_real_broker_and_tls_failures(fleet, tmp_path):
    pair = self_signed_cert(tmp_path)
    if pair is None:
        pytest.skip("openssl CLI not available to make a test certificate")
    cert, key = pair

    async def scenario() -> list[dict[str, Any]]:
        terminator = await tls_terminator(cert, key, fleet["healthy"].port)
        garbage = await garbage_server()
        tls_port = terminator.sockets[0].getsockname()[1]
        garbage_port = garbage.sockets[0].getsockname()[1]
        trusted = Security(protocol="SSL", ssl_context=ssl.create_default_context(cafile=str(cert)))
        untrusted = Security(protocol="SSL", ssl_context=ssl.create_default_context())
        prober = Prober([target("tls-ok", f"{HOST}:{tls_port}", security=trusted),
                         target("tls-untrusted", f"{HOST}:{tls_port}", security=untrusted),
                         target("tls-to-http", f"{HOST}:{garbage_port}", security=trusted)], OPTIONS)
        try:
            return await prober.probe_round_async(T0)
        finally:
            terminator.close()
            garbage.close()

    events = valid(asyncio.run(scenario()))
    boots = {ev["target"]: ev for ev in responses(events, expected=None)}
    assert boots["tls-ok"]["error"] is None and boots["tls-ok"]["cluster_id"] == "healthy-cluster"
    assert boots["tls-untrusted"]["error"] == "TLS_ERROR"
    assert "certificate" in boots["tls-untrusted"]["error_detail"].lower()
    assert boots["tls-to-http"]["error"] == "TLS_ERROR"


def test_sasl_plain_and_identity_check_after_authentication():
    async def scenario() -> tuple[list[dict[str, Any]], FakeKafka]:
        cluster = FakeCluster("sasl-cluster")
        broker = await FakeKafka(cluster, 5, sasl=("alice", "s3cret")).start()
        cluster.brokers = [{"node_id": 5, "port": broker.port, "fenced": False}]
        good = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="alice", password="s3cret")
        bad = Security(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="alice", password="nope")
        prober = Prober([target("good", f"{HOST}:{broker.port}", security=good),
                         target("bad", f"{HOST}:{broker.port}", security=bad)], OPTIONS)
        try:
            return await prober.probe_round_async(T0), broker
        finally:
            await broker.stop()

    events, broker = asyncio.run(scenario())
    valid(events)
    assert {ev["error"] for ev in responses(events, target="good")} == {None}
    (bad,) = responses(events, target="bad")
    assert bad["error"] == "AUTH_FAILED" and "Invalid username or password" in bad["error_detail"]
    good_endpoint = responses(events, target="good", expected={"cluster_id": "sasl-cluster", "node_id": 5})
    assert good_endpoint[0]["responder_node_id"] == 5  # confirmed by ApiVersions v5
    # On the endpoint connection: ApiVersions v3, SASL, then the KIP-1242 check (v5), then Metadata v13.
    (endpoint_connection,) = [c for c in broker.connections if ("ApiVersions", 5) in c]
    assert endpoint_connection == [("ApiVersions", 3), ("SaslHandshake", 1), ("SaslAuthenticate", 2),
                                   ("ApiVersions", 5), ("Metadata", 13), ("DescribeQuorum", 2)]


def test_requests_use_only_advertised_versions():
    async def scenario() -> FakeKafka:
        cluster = FakeCluster("versions-cluster")
        broker = await FakeKafka(cluster, 1).start()
        cluster.brokers = [{"node_id": 1, "port": broker.port, "fenced": False}]
        try:
            await Prober([target("v", f"{HOST}:{broker.port}")], OPTIONS).probe_round_async(T0)
        finally:
            await broker.stop()
        return broker

    broker = asyncio.run(scenario())
    sent = Counter((api, version) for api, version, _ in broker.requests)
    assert sent == {("ApiVersions", 3): 2, ("ApiVersions", 5): 1, ("Metadata", 13): 2,
                    ("DescribeCluster", 2): 1, ("DescribeQuorum", 2): 2}
    (describe,) = [body for api, _, body in broker.requests if api == "DescribeCluster"]
    assert describe["IncludeFencedBrokers"] is True


# ------------------------------------------------------------------ config and CLI


def cli_args(config: Path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    probe.configure_parser(parser)
    return parser.parse_args(["--config", str(config), *extra])


def test_cli_once_writes_valid_events(fleet, tmp_path, capsys):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(
        "clusters:\n"
        f"  - {{name: healthy, bootstrap: ['{fleet['healthy'].address}']}}\n"
        f"  - {{name: gone, bootstrap: ['{HOST}:{refused_port()}']}}\n")
    out = tmp_path / "events.jsonl"
    assert probe.command(cli_args(config, "--once", "--out", str(out), "--timeout-ms", "1000")) == 0
    events = valid([json.loads(line) for line in out.read_text().splitlines()])
    assert Counter((ev["target"], ev["error"]) for ev in responses(events)) == {("healthy", None): 2,
                                                                                ("gone", "CONNECTION_REFUSED"): 1}
    # The probe says what it watches, and when each target's round ended (issue 41): the round last,
    # with the cluster its bootstrap led to (none for a target that never answered).
    (watching,) = [ev for ev in events if ev["type"] == "collector_targets"]
    assert sorted(watching["targets"]) == ["gone", "healthy"]
    rounds = {ev["target"]: ev for ev in events if ev["type"] == "collector_round"}
    assert (rounds["healthy"]["cluster_id"], rounds["gone"]["cluster_id"]) == ("healthy-cluster", None)
    assert all(ev["ts"] <= rounds[ev["target"]]["ts"] for ev in events if ev.get("target") in rounds)
    assert "failing now: gone" in capsys.readouterr().err


def test_cli_publishes_to_the_bus(fleet, tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    from streaming.records import topics

    bus = fleet["healthy"]  # any Kafka will do as the bus
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"bus: {{bootstrap_servers: '{bus.address}'}}\n"
                      f"clusters:\n  - {{name: self, bootstrap: ['{bus.address}']}}\n")
    assert probe.command(cli_args(config, "--once")) == 0
    consumer = KafkaConsumer(bootstrap_servers=bus.address, fetch_max_wait_ms=50)
    try:
        partition = TopicPartition(topics.METADATA, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < 4 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got += records
    finally:
        consumer.close()
    events = [(r.key, event_from_dict(json.loads(r.value))) for r in got]
    # Two answers and the round, keyed by the cluster id; the targets it watches, by none.
    assert Counter((key, event.type) for key, event in events) == {
        (b"healthy-cluster", "metadata_response"): 2, (b"healthy-cluster", "collector_round"): 1,
        (b"", "collector_targets"): 1}


def test_the_configured_pin_reaches_the_probe_target():
    # The bootstrap of a pinned target asks a Kafka 4.4 broker to confirm the pin (KIP-1242, issue 31).
    config = FleetwatchConfig.model_validate({"clusters": [
        {"name": "pay", "bootstrap": ["b1.pay:9092"], "expected_cluster_id": "MkU3OEVBNTcwNTJENDM2Qg"},
        {"name": "free", "bootstrap": ["b1.free:9092"]}]})
    assert [t.expected_cluster_id for t in targets_from_config(config, environ={})] == ["MkU3OEVBNTcwNTJENDM2Qg", None]


def test_config_problems_are_one_line_errors(tmp_path):
    def config(security: dict[str, Any], bootstrap: list[str] | None = None) -> FleetwatchConfig:
        return FleetwatchConfig.model_validate({"clusters": [
            {"name": "pay", "bootstrap": bootstrap or ["b1.pay:9092"], "security": security}]})

    sasl = {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username_env": "PAY_USER",
            "password_env": "PAY_PASS"}
    with pytest.raises(ConfigError, match="PAY_PASS"):
        targets_from_config(config(sasl), environ={"PAY_USER": "u"})
    (resolved,) = targets_from_config(config(sasl), environ={"PAY_USER": "u", "PAY_PASS": "p"})
    assert resolved.security.sasl and resolved.security.tls and resolved.security.password == "p"
    with pytest.raises(ConfigError, match="sasl_mechanism"):
        targets_from_config(config({"protocol": "SASL_PLAINTEXT"}), environ={})
    with pytest.raises(ConfigError, match="host:port"):
        targets_from_config(config({}, bootstrap=["no-port"]), environ={})
    with pytest.raises(ConfigError, match="TLS files"):
        targets_from_config(config({"protocol": "SSL", "ssl_cafile": str(tmp_path / "missing.pem")}), environ={})
    path = tmp_path / "c.yaml"
    path.write_text("clusters: [{name: a, bootstrap: ['h:1']}]\n")
    with pytest.raises(ConfigError, match="timeout"):
        probe.command(cli_args(path, "--once", "--out", str(tmp_path / "o.jsonl"), "--timeout-ms", "6000"))
    with pytest.raises(ConfigError, match="bus"):
        probe.command(cli_args(path, "--once"))


def test_hostnames_are_resolved_and_unknown_hosts_named(fleet):
    prober = Prober([target("by-name", f"localhost:{fleet['healthy'].port}"),
                     target("nowhere", "no-such-host.invalid:9092")], OPTIONS)
    events = valid(prober.probe_round(T0))
    by_name = responses(events, target="by-name", expected=None)
    assert [(ev["endpoint"], ev["error"], ev["cluster_id"]) for ev in by_name] == [
        (f"localhost:{fleet['healthy'].port}", None, "healthy-cluster")]
    assert [ev["error"] for ev in responses(events, target="nowhere")] == ["UNKNOWN_HOST"]


@pytest.mark.parametrize("refusal", [35, 42])
def test_a_broker_that_refuses_the_identity_check_is_compared_by_cluster_id(refusal):
    # UNSUPPORTED_VERSION or INVALID_REQUEST to ApiVersions v5: an error answer from Kafka itself.
    async def scenario() -> tuple[list[list[dict[str, Any]]], FakeKafka]:
        cluster = FakeCluster("odd-cluster")
        broker = await FakeKafka(cluster, 4, v5_error=refusal).start()
        cluster.brokers = [{"node_id": 4, "port": broker.port, "fenced": False}]
        prober = Prober([target("odd", f"{HOST}:{broker.port}")], OPTIONS)
        try:
            return [await prober.probe_round_async(T0 + k * ROUND_MS) for k in range(3)], broker
        finally:
            await broker.stop()

    rounds, broker = asyncio.run(scenario())
    for events in rounds:
        assert [(ev["error"], ev["cluster_id"], ev["responder_node_id"]) for ev in valid(events)
                if ev["type"] == "metadata_response"] == [(None, "odd-cluster", 4)] * 2
    v5_attempts = [c for c in broker.connections if ("ApiVersions", 5) in c]
    assert len(v5_attempts) == 1  # tried once, then not again for IDENTITY_RETRY_S on that endpoint


def test_a_connection_dropped_during_the_identity_check_does_not_turn_it_off():
    # A broker restarting closes the connection: a transport failure of that exchange, not a
    # refusal, so the next round sends ApiVersions v5 again (and a misroute would still be caught).
    async def scenario() -> tuple[list[list[dict[str, Any]]], FakeKafka]:
        cluster = FakeCluster("restarting-cluster")
        broker = await FakeKafka(cluster, 4, drop_v5_times=1).start()
        cluster.brokers = [{"node_id": 4, "port": broker.port, "fenced": False}]
        prober = Prober([target("restarting", f"{HOST}:{broker.port}")], OPTIONS)
        try:
            return [await prober.probe_round_async(T0 + k * ROUND_MS) for k in range(3)], broker
        finally:
            await broker.stop()

    rounds, broker = asyncio.run(scenario())
    endpoint_errors = [[ev["error"] for ev in valid(events) if ev["type"] == "metadata_response" and ev["expected"]]
                       for events in rounds]
    assert endpoint_errors == [["CONNECTION_CLOSED"], [None], [None]]
    v5_attempts = [c for c in broker.connections if ("ApiVersions", 5) in c]
    assert len(v5_attempts) == 3  # every round, the dropped one included


@pytest.mark.broker
def test_publish_failures_with_the_bus_away_are_one_counted_line_not_one_per_record(tmp_path, caplog):
    # With the bus away every record the producer holds expires on its own (thousands per second at
    # 1,000 clusters): the errback the producer calls for each must not log each.
    from kafka.errors import KafkaTimeoutError

    from streaming.bus import EmbeddedBus
    from streaming.collect.probe import BusPublisher

    with EmbeddedBus(log_path=tmp_path / "tansu.log") as bus:
        publisher = BusPublisher(bus.bootstrap)
        try:
            with caplog.at_level("WARNING", logger="streaming.collect.probe.publish"):
                for _ in range(2000):
                    publisher._failed(KafkaTimeoutError("Expiring 1 record(s): 120000 ms has passed"))
        finally:
            publisher.close()
    lines = [r for r in caplog.records if r.getMessage() == "publishing an event failed"]
    assert publisher.failures == 2000
    assert len(lines) == 1 and lines[0].failures == 1
