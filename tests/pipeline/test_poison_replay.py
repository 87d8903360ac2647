"""Poison input through the real Spark job (issue 19): a recorded fleet with hostile events mixed in
gives exactly the alerts of the clean fleet, quarantines every hostile event with its reason, and
writes to SQLite and PostgreSQL without failing a batch.

The poison is what the issue measured or found by reading: a heartbeat whose `ts` is >= 2^63
(OverflowError in the parse stage), one in microseconds (the watermark jumps years ahead: 30 false
alerts), one in nanoseconds, ids above 2^31-1 (PostgreSQL's 32-bit columns) and 2^63 (SQLite),
two cluster ids longer than 255 characters sharing a prefix (truncated on PostgreSQL, then one
upsert hits a row twice), and heartbeats without a cluster id from two clusters (merged into one
shard: a false epoch regression; a NULL primary key on PostgreSQL).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from sqlalchemy import func, select

from streaming.collect.simulate import FAULT_KINDS, FleetSpec, Simulation
from streaming.detect import detect
from streaming.job import replay_file
from streaming.records.contract import event_from_dict
from streaming.store import Store, alert_history, alerts, quarantine

pytestmark = pytest.mark.spark

START_MS = 1_764_000_000_000
LONG_PREFIX = "L" * 255


def _clean() -> list[dict]:
    spec = FleetSpec(clusters=4, brokers=3, faults=FAULT_KINDS, start_ms=START_MS, duration_ms=600_000, seed=3,
                     fault_every_ms=15_000)
    return [event for _, event in Simulation(spec).events()]


def _poison(clean: list[dict]) -> list[tuple[dict, str]]:
    """Hostile events, each with the reason it must be quarantined for."""
    beats = [e for e in clean if e["type"] == "broker_heartbeat"]
    beat = beats[len(beats) // 3]
    other = next(e for e in beats if e["cluster_id"] != beat["cluster_id"] and e["broker_id"] == beat["broker_id"])
    state = next(e for e in clean if e["type"] == "broker_state")
    response = next(e for e in clean if e["type"] == "metadata_response" and e.get("responder_node_id") is not None)
    return [
        ({**beat, "ts": 2**63 + 7}, "ts_out_of_range"),
        ({**beat, "ts": beat["ts"] * 1000}, "ts_out_of_range"),  # microseconds
        ({**beat, "ts": beat["ts"] * 1_000_000}, "ts_out_of_range"),  # nanoseconds
        ({**beat, "ts": beat["ts"] // 1000}, "ts_out_of_range"),  # seconds
        ({**state, "ts": beat["ts"], "broker_id": 2**31}, "out_of_range:broker_id"),
        ({**beat, "broker_id": 2**63 + 1}, "out_of_range:broker_id"),
        ({**response, "ts": beat["ts"], "responder_node_id": 2**31}, "out_of_range:responder_node_id"),
        ({**response, "ts": beat["ts"], "controller_id": 2**31}, "out_of_range:controller_id"),
        ({**beat, "cluster_id": LONG_PREFIX + "-one"}, "too_long:cluster_id"),
        ({**beat, "cluster_id": LONG_PREFIX + "-two"}, "too_long:cluster_id"),
        # Same broker id, two clusters, no cluster id: an epoch far above, then one below.
        ({**beat, "cluster_id": None, "broker_epoch": 1000}, "missing_cluster_id"),
        ({**other, "ts": beat["ts"] + 1, "cluster_id": None, "broker_epoch": 1}, "missing_cluster_id"),
    ]


def _write(path, events: list[dict]) -> None:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """(clean file, poisoned file, the clean fleet's alert objects, expected quarantine reasons)."""
    folder = tmp_path_factory.mktemp("poison")
    clean = _clean()
    poison = _poison(clean)
    cut = len(clean) // 2  # mid-stream: before most alerts
    clean_path, poisoned_path = folder / "clean.jsonl", folder / "poisoned.jsonl"
    _write(clean_path, clean)
    _write(poisoned_path, clean[:cut] + [event for event, _ in poison] + clean[cut:])
    expected = [a.to_dict() for a in detect([event_from_dict(e) for e in clean])]
    assert len({a["rule"] for a in expected}) >= 5, "the clean fleet should raise several kinds of alert"
    return clean_path, poisoned_path, expected, Counter(reason for _, reason in poison)


def test_cli_replay_of_a_poisoned_stream_exits_0_with_the_clean_alerts(streams, tmp_path):
    _, poisoned_path, expected, reasons = streams
    out = tmp_path / "alerts.jsonl"
    result = subprocess.run([sys.executable, "-m", "streaming.cli", "replay", str(poisoned_path),
                             "--alerts-out", str(out)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected
    assert f"quarantined: {sum(reasons.values())}" in result.stdout
    for reason, n in reasons.items():
        assert f"  {reason}: {n}" in result.stdout


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_poisoned_stream_is_stored_with_the_clean_alerts(spark, test_config, streams, tmp_path, request, database):
    _, poisoned_path, expected, reasons = streams
    url = (f"sqlite:///{tmp_path / 'store.db'}" if database == "sqlite"
           else request.getfixturevalue("postgres").create_database())
    store = Store(url)
    try:
        summary = replay_file(poisoned_path, None, test_config, store=store)
        assert summary.quarantined == reasons
        assert summary.alerts == expected
        with store.engine.connect() as conn:
            stored = Counter(conn.scalars(select(quarantine.c.reason)))
            assert stored == reasons
            details = dict(conn.execute(select(quarantine.c.reason, quarantine.c.detail)
                                        .where(quarantine.c.reason == "ts_out_of_range")
                                        .order_by(quarantine.c.id)).all())
            assert details["ts_out_of_range"]  # the detail says which side of the bounds
            history = set(conn.execute(select(alert_history.c.alert_id, alert_history.c.status)).all())
            assert history == {(a["alert_id"], a["status"]) for a in expected}
            assert conn.scalar(select(func.count()).select_from(alerts)) == len({a["alert_id"] for a in expected})
    finally:
        store.close()
