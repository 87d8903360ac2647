"""`fleetwatch replay --what-if`: a simulated broker outage of ~18 s, between a 9 s and a 20 s session
timeout, replayed through the real Spark job with each; and the keys, refused as config errors."""

from __future__ import annotations

import json

import pytest

from streaming.cli import main
from streaming.collect.simulate import FleetSpec, Simulation
from streaming.ops.whatif import compare

START_MS = 1_764_000_000_000


def _alert(rule: str, starts: int, ends: int | None = None, broker: int = 3) -> list[dict]:
    base = {"alert_id": f"{rule}/{broker}/{starts}", "rule": rule, "cluster_id": "C", "target": None,
            "broker_id": broker, "endpoint": None, "starts_at": starts, "ends_at": None, "status": "firing"}
    return [base] if ends is None else [base, {**base, "status": "resolved", "ends_at": ends}]


def test_incidents_are_paired_per_rule_and_subject_where_their_spans_overlap():
    today = (_alert("broker.heartbeat_lost", 100, 200) + _alert("broker.heartbeat_lost", 500, 600)
             + _alert("broker.fenced", 100, 300) + _alert("broker.fenced", 100, 300, broker=1))
    changed = (_alert("broker.heartbeat_lost", 130, 200) + _alert("broker.fenced", 100)
               + _alert("broker.fenced", 100, 300, broker=1) + _alert("broker.partitioned", 700, 800))
    got = {(c.rule, c.kind, c.today and c.today.starts_at, c.changed and c.changed.starts_at)
           for c in compare(today, changed).changes}
    assert got == {("broker.heartbeat_lost", "moved", 100, 130), ("broker.heartbeat_lost", "removed", 500, None),
                   ("broker.fenced", "moved", 100, 100),  # still open at the end with the change
                   ("broker.partitioned", "added", None, 700)}
    assert compare(today, changed).unchanged == {"broker.fenced": 1}


@pytest.mark.parametrize(("change", "said"), [
    ("rules.session_timeout_ms=0", "--what-if: rules.session_timeout_ms: Input should be greater than 0"),
    ("rules.session_timeout_ms=2592000001", "rules.session_timeout_ms: Input should be less than or equal to"),
    ("rules.session_timout_ms=12000", "--what-if: rules.session_timout_ms: unknown key"),
    ("rules.session_timeout_ms=soon", "rules.session_timeout_ms: Input should be a valid integer"),
    ("clusters[eu1].rules.allowed_lateness_ms=1", "clusters[eu1].rules.allowed_lateness_ms: unknown key"),
    ("spark.master=local", "expected rules.KEY=VALUE or clusters[NAME].rules.KEY=VALUE"),
    ("rules.session_timeout_ms", "expected rules.KEY=VALUE"),
])
def test_a_bad_what_if_is_one_line_and_exit_2_before_any_replay(tmp_path, capsys, change, said):
    events = tmp_path / "events.jsonl"
    events.write_text("")
    assert main(["replay", str(events), "--what-if", change]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fleetwatch replay: ") and said in err


@pytest.mark.spark
def test_a_longer_session_timeout_removes_the_heartbeat_lost_alert_of_a_shorter_outage(spark, tmp_path, capsys):
    # Broker 3 stops at ~30 s and registers again at 48 s: silent ~18 s, longer than today's 9 s
    # session timeout (broker.heartbeat_lost fires) and shorter than 20 s (it would not have).
    # (A probe without quorum readings: the session timeout alone decides; with them broker.stalled would
    # fire as well, unchanged by the session.)
    sim = Simulation(FleetSpec(clusters=1, brokers=3, faults=("broker.heartbeat_lost",), start_ms=START_MS,
                               duration_ms=70_000, seed=7, first_fault_ms=30_000, quorum_interval_ms=0))
    events, plain, today = tmp_path / "events.jsonl", tmp_path / "plain.jsonl", tmp_path / "today.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for _, e in sim.events()))
    config = tmp_path / "fleetwatch.yaml"
    config.write_text("spark: {master: 'local[2]', shuffle_partitions: 2}\n")

    assert main(["replay", str(events), "--alerts-out", str(plain), "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["replay", str(events), "--config", str(config), "--alerts-out", str(today),
                 "--what-if", "rules.session_timeout_ms=20000"]) == 0
    report = capsys.readouterr().out

    # The what-if's "today" is `fleetwatch replay`'s alert lines, byte for byte.
    assert today.read_bytes() == plain.read_bytes()
    lost = [json.loads(line) for line in plain.read_text().splitlines()]
    assert {(a["rule"], a["status"], a["broker_id"]) for a in lost} == {
        ("broker.heartbeat_lost", "firing", 3), ("broker.heartbeat_lost", "resolved", 3)}
    assert "`rules.session_timeout_ms` 9000 → 20000" in report
    assert "1 alert(s) would not have fired, 0 more would have, 0 would have moved; 0 unchanged" in report
    rows = [line for line in report.splitlines() if line.startswith("| broker.")]
    assert len(rows) == 1 and rows[0].startswith("| broker.heartbeat_lost | removed | cluster ")
    assert "broker 3" in rows[0]
