"""The fleet simulator: deterministic, contract-valid, realistic when healthy, and labelled with
what it injected: each fault raises the rules it is designed to raise, as the one oracle of the
rules outside the product (the reference detector of bench/reference/) reads the stream, and
every alert of the oracle is accounted for by a fault."""

from __future__ import annotations

import argparse
import itertools
import json
import re
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.partitioner.default import murmur2
from support.bus_records import consume_all
from support.reference import reference_alerts

from streaming.bus import EmbeddedBus
from streaming.collect import simulate
from streaming.collect.simulate import (
    DEFAULT_START_MS,
    FAULT_KINDS,
    FleetSpec,
    Simulation,
    command,
    configure_parser,
    parse_faults,
    produce_live,
)
from streaming.collect.simulate.placement import Placement
from streaming.records import topics
from streaming.records.contract import event_from_dict, event_to_dict

TOPIC_OF = {"metadata_response": topics.METADATA, "broker_state": topics.BROKER_STATES,
            "broker_heartbeat": topics.HEARTBEATS, "partition_layout": topics.METADATA,
            "quorum_reading": topics.METADATA, "collector_round": topics.METADATA}
# What the simulated broker agents send beyond the contract with a heartbeat (SPEC section 3's example).
AGENT_FIELDS = ("want_fence", "want_shutdown", "caught_up")


def make_spec(**overrides: Any) -> FleetSpec:
    fields: dict[str, Any] = {"clusters": 3, "brokers": 3, "faults": (), "start_ms": DEFAULT_START_MS,
                              "duration_ms": 120_000}
    return FleetSpec(**(fields | overrides))


def oracle(sim: Simulation) -> list[dict[str, Any]]:
    """The alert lines the reference detector gives for the stream, as the simulator sends it."""
    return reference_alerts([json.dumps(ev) for _, ev in sim.events()])


def firing(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [alert for alert in alerts if alert["status"] == "firing"]


# -- parse_faults ---------------------------------------------------------------------------------


def test_parse_faults_all_none_and_lists() -> None:
    assert parse_faults("all") == FAULT_KINDS
    assert parse_faults(" none ") == ()
    assert parse_faults("heartbeat_lost, connection.misrouted,heartbeat_lost") == (
        "broker.heartbeat_lost", "connection.misrouted")
    assert parse_faults("flapping,controller_flapping") == ("broker.flapping", "cluster.controller_flapping")


@pytest.mark.parametrize("text", ["heartbeat_gone", "broker.misrouted", "", "fenced,,partitioned"])
def test_parse_faults_rejects_unknown_names_in_one_line(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_faults(text)
    message = str(info.value)
    assert "\n" not in message
    assert "unknown fault" in message and "broker.heartbeat_lost" in message and "endpoint.collision" in message


def test_spec_rejects_disorder_beyond_the_allowed_lateness() -> None:
    with pytest.raises(ValueError, match="jitter_ms"):
        make_spec(jitter_ms=5000)
    with pytest.raises(ValueError, match="unknown fault kinds"):
        make_spec(faults=("broker.nope",))


# -- determinism and the healthy fleet ------------------------------------------------------------


def test_same_spec_gives_the_same_events_and_labels() -> None:
    spec = make_spec(clusters=4, faults=FAULT_KINDS, duration_ms=600_000, jitter_ms=1500, seed=7)
    first, second = Simulation(spec), Simulation(spec)
    assert list(first.events()) == list(second.events())
    assert first.labels() == second.labels() != []
    other = Simulation(make_spec(clusters=4, seed=8))
    assert {ev["cluster_id"] for _, ev in other.events()} != {ev["cluster_id"] for _, ev in first.events()}


def test_healthy_fleet_follows_the_contract_and_raises_nothing() -> None:
    sim = Simulation(make_spec(clusters=3, brokers=3, duration_ms=90_000))
    events = list(sim.events())
    assert sim.labels() == [] and sim.faults == ()
    assert oracle(sim) == []

    last_ts = 0
    ids: dict[str, str] = {}
    heartbeats: dict[tuple[str, int], list[int]] = defaultdict(list)
    states: dict[tuple[str, int], list[tuple[int, str]]] = defaultdict(list)
    controllers = set()
    layouts: dict[str, list[int]] = defaultdict(list)
    readings: dict[str, list[int]] = defaultdict(list)
    rounds: dict[str, list[int]] = defaultdict(list)
    for topic, ev in events:
        event_from_dict(ev)  # raises on any contract violation
        assert topic == TOPIC_OF[ev["type"]]
        assert ev["ts"] >= last_ts
        last_ts = ev["ts"]
        if ev["type"] == "metadata_response":
            assert ev["error"] is None
            ids.setdefault(ev["target"], ev["cluster_id"])
            assert ev["cluster_id"] == ids[ev["target"]]
            controllers.add((ev["target"], ev["controller_id"]))
            if ev["expected"] is None:
                assert ev["responder_node_id"] is None and ev["endpoint"] == f"{ev['target']}-b1.fleet.local:9092"
            else:
                assert ev["expected"] == {"cluster_id": ev["cluster_id"], "node_id": ev["responder_node_id"]}
            assert [b["node_id"] for b in ev["brokers"]] == [1, 2, 3]
        elif ev["type"] == "partition_layout":
            layouts[ev["target"]].append(ev["ts"])
            assert ev["cluster_id"] == ids[ev["target"]] and ev["complete"] is True
            for topic_layout in ev["topics"]:
                for _, leader, replicas, isr in topic_layout["partitions"]:
                    assert leader == replicas[0] and isr == replicas  # healthy: every replica in sync
        elif ev["type"] == "collector_round":
            rounds[ev["target"]].append(ev["ts"])
            assert ev["cluster_id"] == ids[ev["target"]]
        elif ev["type"] == "quorum_reading":
            readings[ev["target"]].append(ev["ts"])
            assert ev["cluster_id"] == ids[ev["target"]] and ev["controller_id"] in (1, 2, 3)
            # Healthy: every broker fetching (its last fetch under half a second old), none fenced.
            assert [(node, age < 500, fenced) for node, age, fenced in ev["fetches"]] == [
                (1, True, False), (2, True, False), (3, True, False)]
        elif ev["type"] == "broker_heartbeat":
            heartbeats[(ev["cluster_id"], ev["broker_id"])].append(ev["ts"])
            if ev["kind"] == "registration":
                assert ev["endpoints"][0]["port"] == 9092
        else:
            states[(ev["cluster_id"], ev["broker_id"])].append((ev["ts"], ev["state"]))

    assert sorted(ids) == ["c0000", "c0001", "c0002"]
    assert len(set(ids.values())) == 3
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) for cid in ids.values())
    assert len(controllers) == 3  # one stable controller per cluster
    assert len(heartbeats) == 9
    # The probe's default layout cadence, from its first round on: 90 s hold two readings a cluster.
    assert all(len(times) == 2 and times[1] - times[0] == 60_000 for times in layouts.values()) and len(layouts) == 3
    # A quorum reading a second (issue 44), from its first round on.
    assert len(readings) == 3 and all({b - a for a, b in itertools.pairwise(times)} == {1000}
                                      for times in readings.values())
    assert len(rounds) == 3 and all({b - a for a, b in itertools.pairwise(times)} == {5000}  # and says its rounds
                                    for times in rounds.values())
    for times in heartbeats.values():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(1800 <= gap <= 2200 for gap in gaps)
    for (fenced_at, first), (online_at, second) in states.values():
        assert (first, second) == ("FENCED", "ONLINE") and online_at - fenced_at < 2000


def test_events_are_the_wire_form_of_contract_records() -> None:
    # One way from a record to the wire (contract.event_to_dict): every contract field, null when
    # unknown, in the contract's order; heartbeats add the agent's own fields after them.
    sim = Simulation(make_spec(clusters=4, faults=FAULT_KINDS, duration_ms=600_000))
    kinds = set()
    for _, ev in sim.events():
        contract_part = {k: v for k, v in ev.items() if k not in AGENT_FIELDS}
        wire = event_to_dict(event_from_dict(ev))
        assert contract_part == wire and list(contract_part) == list(wire)
        extra = list(ev)[len(wire):]
        assert extra == (list(AGENT_FIELDS) if ev["type"] == "broker_heartbeat" and ev["kind"] == "heartbeat" else [])
        kinds.add((ev["type"], ev.get("kind"), ev.get("error") is None))
    assert len(kinds) == 8  # responses with and without an error, both heartbeat kinds, states, layouts, readings,
    # rounds


# -- faults and their labels ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_each_fault_kind_raises_the_rules_it_is_designed_to_and_recovers(kind: str) -> None:
    sim = Simulation(make_spec(clusters=2, faults=(kind,), duration_ms=420_000, fault_every_ms=600_000))
    (fault,) = sim.faults
    assert (fault.kind, fault.rules[0]) == (kind, kind) and fault.start_ms < fault.end_ms < sim.spec.end_ms
    alerts = oracle(sim)
    raised = firing(alerts)
    assert kind in {alert["rule"] for alert in raised}
    assert [sim.cause(alert) for alert in raised] == [fault] * len(raised)
    # Its own alert names the broker or the address the fault hit.
    for alert in (a for a in raised if a["rule"] == kind):
        for field in ("broker_id", "endpoint"):
            assert None in (alert[field], getattr(fault, field)) or alert[field] == getattr(fault, field)
    assert len(alerts) == 2 * len(raised)  # every alert ended: the cluster recovered


def test_heartbeat_lost_starts_at_the_last_heartbeat_plus_the_session_timeout_or_at_kafkas_fence() -> None:
    sim = Simulation(make_spec(clusters=1, faults=("broker.heartbeat_lost",), duration_ms=120_000))
    (fault,) = sim.faults
    alerts = oracle(sim)
    (_, lost) = [a for a in alerts if a["rule"] == fault.kind]
    assert (lost["status"], lost["broker_id"]) == ("resolved", fault.broker_id)
    # Its heartbeats: its agent's, and its fetches from the KRaft leader that quorum readings show.
    agent = [ev["ts"] for _, ev in sim.events()
             if ev["type"] == "broker_heartbeat" and ev["broker_id"] == fault.broker_id]
    fetches = [ev["ts"] - age for _, ev in sim.events() if ev["type"] == "quorum_reading"
               for node, age, _ in ev["fetches"] if node == fault.broker_id and age < 9000]
    beats = agent + fetches
    last = max(ts for ts in beats if ts <= fault.start_ms)
    # Its last fetch came to the leader up to 500 ms before the crash (held until then).
    last_fetch = max(ts for ts in fetches if ts <= fault.start_ms)
    assert fault.start_ms - 500 <= last_fetch
    restart = min(ts for ts in beats if ts > last)
    (fenced,) = [ev["ts"] for _, ev in sim.events() if ev["type"] == "broker_state"
                 and ev["broker_id"] == fault.broker_id and ev["state"] == "FENCED" and ev["ts"] > fault.start_ms]
    # Its deadline falls due at the first reading (or round) after it. The controller's fence (its last
    # agent heartbeat + 9 s, + 50 ms: Kafka's session counts BrokerHeartbeats, not fetches) is a
    # broker_state here, read from another topic: only a reading's fence pages early
    # (streaming/detect/README.md), so the deadline's page comes with that reading.
    shown = min(ev["ts"] for _, ev in sim.events()
                if ev["type"] in ("quorum_reading", "collector_round") and ev["ts"] >= last + 9000)
    assert max(ts for ts in agent if ts <= fault.start_ms) + 9000 < fenced < shown
    assert (lost["starts_at"], lost["ends_at"]) == (last + 9000, restart)
    (stalled, _) = [a for a in alerts if a["rule"] == "broker.stalled"]
    assert stalled["starts_at"] == last_fetch + 2500 and lost["details"]["escalates"] == stalled["alert_id"]


@pytest.mark.parametrize("spec", [
    make_spec(clusters=16, faults=FAULT_KINDS, duration_ms=1_200_000, seed=3),
    make_spec(clusters=1, brokers=2, faults=FAULT_KINDS, duration_ms=2_400_000, fault_every_ms=20_000),
    # One broker: it is the bootstrap broker too, and a DR clone's endpoints outlive its fault.
    make_spec(clusters=2, brokers=1, faults=FAULT_KINDS, duration_ms=2_400_000, fault_every_ms=20_000, seed=3),
], ids=["16x3", "1x2", "2x1"])
def test_on_a_mixed_fleet_every_alert_has_its_fault_and_every_fault_its_alert(spec: FleetSpec) -> None:
    sim = Simulation(spec)
    raised = firing(oracle(sim))
    assert len(raised) > len(sim.faults) > 5
    assert [alert for alert in raised if sim.cause(alert) is None] == []
    answered = {(sim.cause(alert), alert["rule"]) for alert in raised}
    assert [fault for fault in sim.faults if (fault, fault.kind) not in answered] == []


def test_faults_that_cannot_finish_are_not_started_and_long_windows_stay_open() -> None:
    assert Simulation(make_spec(clusters=1, faults=("broker.stuck_stopping",), duration_ms=150_000)).faults == ()
    flapping = Simulation(make_spec(clusters=1, faults=("broker.flapping",), duration_ms=200_000))
    (fault,) = flapping.faults
    assert fault.end_ms < flapping.spec.end_ms
    # Its 300 s window outlasts the stream: the alert has no resolved line.
    assert [(a["rule"], a["status"]) for a in oracle(flapping)] == [("broker.flapping", "firing")]


def test_faults_needing_more_brokers_or_clusters_are_skipped() -> None:
    sim = Simulation(make_spec(clusters=1, brokers=1, duration_ms=600_000,
                               faults=("cluster.controller_disagreement", "endpoint.collision", "broker.fenced")))
    assert set(sim.skipped) == {"cluster.controller_disagreement", "endpoint.collision"}
    assert [f.kind for f in sim.faults] == ["broker.fenced"] * len(sim.faults) != []


def test_jitter_keeps_disorder_within_bounds_and_changes_no_alert() -> None:
    ordered = Simulation(make_spec(clusters=4, faults=FAULT_KINDS, duration_ms=400_000))
    jittered = Simulation(make_spec(clusters=4, faults=FAULT_KINDS, duration_ms=400_000, jitter_ms=3000))
    newest, worst, overtaken = 0, 0, 0
    for _, ev in jittered.events():
        worst = max(worst, newest - ev["ts"])
        overtaken += ev["ts"] < newest
        newest = max(newest, ev["ts"])
    assert 0 < worst < 3000 and overtaken > 100
    key = lambda ev: json.dumps(ev, sort_keys=True)  # noqa: E731
    assert sorted(map(key, (ev for _, ev in jittered.events()))) == sorted(
        map(key, (ev for _, ev in ordered.events())))
    assert sorted(map(key, oracle(jittered))) == sorted(map(key, oracle(ordered))) != []


# -- the partition layout (issue 30) -----------------------------------------------------------------


def _layout(placement: Placement) -> dict[str, list[tuple[int, int, list[int], list[int]]]]:
    return {t.name: [(i, leader, list(r), list(isr)) for i, leader, r, isr in t.partitions]
            for t in placement.reading()}


def test_the_placement_moves_leaders_and_isrs_as_kafkas_controller_does() -> None:
    placement = Placement(3)
    healthy = _layout(placement)
    assert [len(parts[0][2]) for parts in healthy.values()] == [3, 2]  # orders, clicks
    assert {t.name: t.min_insync for t in placement.reading()} == {"orders": 2, "clicks": 1}
    placement.apply(frozenset({1, 2}))  # broker 3 fenced: out of every ISR, its leaderships moved
    one_down = _layout(placement)
    assert all(3 not in isr and leader in isr and len(isr) == len(r) - 1 if 3 in r else isr == r
               for parts in one_down.values() for _, leader, r, isr in parts)
    placement.apply(frozenset({1}))  # broker 2 too (the real-Kafka test's second freeze)
    two_down = _layout(placement)
    assert all((leader, isr) == (1, [1]) for _, leader, _, isr in two_down["orders"])  # under min ISR 2
    # clicks partitions held by 2 and 3 only: offline, 2 kept in the ISR as the last one in sync
    assert {(tuple(r), leader, tuple(isr)) for _, leader, r, isr in two_down["clicks"] if 1 not in r} == {
        ((2, 3), -1, (2,))}
    placement.apply(frozenset({1, 3}))  # 3 is back, but was not in sync when 2 went: still offline
    assert {leader for _, leader, r, _ in _layout(placement)["clicks"] if 1 not in r} == {-1}
    placement.apply(frozenset({1, 2, 3}))  # 2 is back: it leads, 3 catches up from it
    back = _layout(placement)
    assert all(sorted(isr) == sorted(r) for parts in back.values() for *_, r, isr in parts)
    assert back != healthy  # leaders stay where they moved ...
    placement.elect_preferred()  # ... until the periodic preferred-leader election
    assert _layout(placement) == healthy


def test_two_brokers_down_together_take_partitions_offline_and_under_min_isr() -> None:
    sim = Simulation(make_spec(clusters=2, faults=("cluster.partitions_offline",), duration_ms=420_000,
                               fault_every_ms=600_000))
    (fault,) = sim.faults
    layouts = [ev for _, ev in sim.events()
               if ev["type"] == "partition_layout" and ev["cluster_id"] == fault.cluster_id]
    assert all(event_from_dict(ev) for ev in layouts)
    # The fault starts 15 s before a reading: both brokers fenced by then, restarted 3 s after it.
    (during,) = [ev for ev in layouts if fault.start_ms < ev["ts"] < fault.start_ms + 60_000]
    assert during["ts"] == fault.start_ms + 15_000
    topics_read = {t["name"]: t["partitions"] for t in during["topics"]}
    assert all((leader, isr) == (1, [1]) for _, leader, _, isr in topics_read["orders"])
    offline = [p for p in topics_read["clicks"] if p[1] == -1]
    assert offline and all(sorted(p[2]) == [2, 3] and len(p[3]) == 1 for p in offline)
    (after,) = [ev for ev in layouts if ev["ts"] == during["ts"] + 60_000]
    assert all(leader >= 0 and sorted(isr) == sorted(r)
               for t in after["topics"] for _, leader, r, isr in t["partitions"])
    alerts = oracle(sim)
    cluster_lines = {(a["rule"], a["status"], a["ends_at"] or a["starts_at"])
                     for a in alerts if a["rule"].startswith("cluster.")}
    assert cluster_lines == {
        ("cluster.partitions_offline", "firing", during["ts"]), ("cluster.partitions_offline", "resolved", after["ts"]),
        ("cluster.under_min_isr", "firing", during["ts"]), ("cluster.under_min_isr", "resolved", after["ts"])}
    lost = [a for a in firing(alerts) if a["rule"] == "broker.heartbeat_lost"]
    assert sorted(a["broker_id"] for a in lost) == [2, 3]
    # Each crash's incident carries its impact on the layout read before it (README "Blast radius"):
    # the healthy one, in which the other broker is still in sync.
    assert all(a["details"]["impact"]["layout_at"] == during["ts"] - 60_000 for a in lost)
    assert [(a["details"]["impact"]["partitions_offline"], a["details"]["impact"]["partitions_under_min_isr"])
            for a in lost] == [(0, 0), (0, 0)]


# -- output ---------------------------------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    return command(parser.parse_args(argv))


def test_cli_writes_events_and_labels(tmp_path, capsys) -> None:
    events, labels = tmp_path / "events.jsonl", tmp_path / "labels.jsonl"
    rc = run_cli(["--clusters", "2", "--brokers", "2", "--duration", "200", "--faults", "heartbeat_lost,fenced",
                  "--out", str(events), "--labels", str(labels)])
    assert rc == 0
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    assert lines[0]["ts"] >= DEFAULT_START_MS and all(event_from_dict(ev) for ev in lines)
    written = [json.loads(line) for line in labels.read_text().splitlines()]
    assert [(label["kind"], label["rules"][0], label["broker_id"]) for label in written] == [
        ("broker.heartbeat_lost", "broker.heartbeat_lost", 2), ("broker.fenced", "broker.fenced", 2)]
    assert all(label["start_ms"] < label["end_ms"] for label in written)
    summary = capsys.readouterr().out.strip()
    assert "\n" not in summary and f"{len(lines)} events" in summary and "2 faults injected" in summary


@pytest.mark.parametrize(("argv", "error"), [
    ([], "--out"),
    (["--out", "x.jsonl", "--faults", "nope"], "unknown fault"),
    (["--out", "x.jsonl", "--jitter-ms", "6000"], "jitter_ms"),
])
def test_cli_refuses_bad_input_with_one_line(argv: list[str], error: str, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert run_cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert error in err and "\n" not in err
    assert not (tmp_path / "x.jsonl").exists()


@pytest.fixture()
def bus(tmp_path):
    """A real Kafka-protocol broker (Tansu), telemetry topics of four partitions each."""
    with EmbeddedBus(topics=topics.TELEMETRY, partitions=4, log_path=tmp_path / "tansu.log") as embedded:
        yield embedded


@pytest.mark.broker
def test_produce_live_sends_every_event_to_its_topic_keyed_by_cluster(bus) -> None:
    sim = Simulation(make_spec(clusters=2, duration_ms=30_000, faults=("cluster.id_invalid",)))
    run = produce_live(sim, bus.bootstrap, realtime=False)
    expected = list(sim.events())
    assert run.sent == len(expected) and not run.stopped
    received = consume_all(bus.bootstrap, topics.TELEMETRY, len(expected))
    assert len(received) == len(expected)
    for record in received:
        event = json.loads(record.value)
        assert record.topic == TOPIC_OF[event["type"]] and record.key == (event["cluster_id"] or "").encode()
        assert b'": ' not in record.value
        # Kafka's keyed partitioning (the Java client's murmur2), so each cluster stays in order.
        assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % 4
    assert len({(r.topic, r.partition) for r in received}) > 3
    # Each cluster's events of a topic arrive in the order the simulation emitted them.
    for key, topic in {(r.key, r.topic) for r in received}:
        got = [json.loads(r.value) for r in sorted(received, key=lambda r: r.offset)
               if r.key == key and r.topic == topic]
        assert got == [ev for t, ev in expected if t == topic and (ev["cluster_id"] or "").encode() == key]


@pytest.mark.broker
def test_produce_live_in_real_time_starts_now_and_stops_on_request(bus) -> None:
    stop = threading.Event()
    sim = Simulation(make_spec(duration_ms=60_000))
    before = int(time.time() * 1000)
    threading.Timer(2.0, stop.set).start()  # the request to stop, not a synchronisation
    run = produce_live(sim, bus.bootstrap, stop=stop)
    stopped_at = time.time() * 1000
    assert run.stopped and 0 < run.sent < len(list(sim.events()))
    assert before <= run.start_ms <= stopped_at
    received = consume_all(bus.bootstrap, topics.TELEMETRY, run.sent)
    assert len(received) == run.sent  # flushed before produce_live returned
    assert all(run.start_ms <= json.loads(r.value)["ts"] <= stopped_at + 1000 for r in received)


@pytest.mark.broker
def test_produce_live_in_real_time_sends_events_as_their_time_comes_not_when_the_run_ends(bus) -> None:
    # A small fleet's events are a few a second, far from filling a flush: each still goes out within
    # a flush's linger (50 ms) of its time. The bound below holds on a loaded machine; a run that
    # sent its events at its end (a minute on) or only by size would have none on the bus by then.
    stop = threading.Event()
    runs: list[Any] = []
    producing = threading.Thread(target=lambda: runs.append(
        produce_live(Simulation(make_spec(duration_ms=60_000)), bus.bootstrap, stop=stop)))
    producing.start()
    consumer = KafkaConsumer(*topics.TELEMETRY, bootstrap_servers=bus.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, group_id=None)
    lags: list[float] = []
    deadline = time.monotonic() + 30
    try:
        while len(lags) < 20 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                now = time.time() * 1000
                lags += [now - json.loads(record.value)["ts"] for record in batch]
    finally:
        consumer.close()
        stop.set()
        producing.join(60)
    assert runs and runs[0].stopped
    assert len(lags) >= 20, f"{len(lags)} events on the bus in 30 s of a live run"
    assert sorted(lags)[len(lags) // 2] < 5_000


def test_module_exports_its_api() -> None:
    assert set(simulate.__all__) >= {"FAULT_KINDS", "FleetSpec", "Simulation", "parse_faults", "write_events",
                                     "write_labels", "produce_live", "configure_parser", "command"}
