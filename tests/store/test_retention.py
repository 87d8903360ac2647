"""Retention of what the job writes (deploy/README.md, "Retention"), on SQLite and a real PostgreSQL:
old rows go, in bounded rounds, through indexes; the history of a firing alert stays; the job runs it
every few micro-batches (real Spark DataFrames into the real writer).
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text

from streaming.config import FleetwatchConfig, RetentionConfig
from streaming.metrics import render_metrics
from streaming.pipeline.state import OUTPUT_SCHEMA
from streaming.records.alert import Alert
from streaming.sinks.batch_writer import BatchWriter
from streaming.store import (
    Store,
    alert_history,
    alerts,
    broker_transitions,
    brokers,
    clusters,
    controller_history,
    pipeline_progress,
    quarantine,
    source_clocks,
    targets,
)

DAY = 86_400_000
NOW = 1_795_000_000_000
TABLES = (alert_history, broker_transitions, controller_history, alerts, quarantine, pipeline_progress,
          brokers, clusters, targets, source_clocks)


@pytest.fixture
def db(store_url):
    s = Store(store_url)
    yield s
    s.close()


def _alert(alert_id: str, status: str, at: int) -> dict:
    return {"schema": "fleetwatch.alert/v1", "alert_id": alert_id, "rule": "broker.fenced", "status": status,
            "severity": "warning", "cluster_id": "c1", "target": None, "broker_id": 1, "endpoint": None,
            "starts_at": at - 1000, "ends_at": at if status == "resolved" else None, "summary": "s", "details": {}}


def _subjects(cluster_id: str, broker_ids: range, target: str, at: int) -> dict:
    """A cluster, its brokers and its target, last heard of at `at`."""
    return {
        "brokers": [{"cluster_id": cluster_id, "broker_id": b, "state": "ONLINE", "fenced": False, "broker_epoch": 1,
                     "last_heartbeat_ms": at, "last_answer_ms": at, "rack": None, "endpoints": [],
                     "updated_ms": at} for b in broker_ids],
        "clusters": [{"cluster_id": cluster_id, "target": target, "controller_id": 1, "last_response_ms": at,
                      "updated_ms": at}],
        "targets": [{"target": target, "pinned_cluster_id": cluster_id, "last_cluster_id": cluster_id,
                     "last_ok_ms": at, "updated_ms": at}],
        # The collectors that reported on them (a source heard of in no alert's subject: none keeps it).
        "source_clocks": [{"source": f"agent-{cluster_id}-{b}", "lead_ms": -300, "events": 2, "ahead": 0,
                           "updated_ms": at} for b in broker_ids],
    }


def _fill(store: Store, *, age_ms: int, n: int, tag: str) -> None:
    """n rows of every growing table (a cluster and its target, n brokers), `age_ms` old."""
    at = NOW - age_ms
    store.write(_subjects(f"{tag}-c", range(n), f"{tag}-t", at))
    store.write({
        "broker_transitions": [{"cluster_id": "c1", "broker_id": 1, "ts": at + i, "state": "ONLINE",
                                "previous_state": None, "reason": None} for i in range(n)],
        "controller_history": [{"cluster_id": "c1", "ts": at + i, "controller_id": 1} for i in range(n)],
        "quarantine": [{"origin": f"{tag}:0:{i}", "reason": "not_json", "raw": "x", "recorded_at": at + i}
                       for i in range(n)],
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": i, "recorded_at": at + i, "input_rows": 1}
                              for i in range(n) if tag == "old"] +
                             [{"query": "fleetwatch", "batch_id": 1000 + i, "recorded_at": at + i, "input_rows": 1}
                              for i in range(n) if tag == "new"],
    })
    store.record_alerts(map(Alert.from_dict, [line for i in range(n) for line in (_alert(f"{tag}{i}", "firing", at + i),
                                                            _alert(f"{tag}{i}", "resolved", at + i))]))


def _counts(store: Store) -> dict[str, int]:
    with store.engine.connect() as conn:
        return {t.name: conn.scalar(select(func.count()).select_from(t)) for t in TABLES}


def test_defaults_are_days():
    retention = FleetwatchConfig().store.retention
    assert (retention.history_days, retention.resolved_alerts_days, retention.quarantine_days,
            retention.progress_days, retention.subjects_days) == (30, 30, 7, 2, 30)


def test_old_rows_go_new_rows_and_the_history_of_firing_alerts_stay(db):
    store = db
    _fill(store, age_ms=40 * DAY, n=4, tag="old")
    _fill(store, age_ms=1 * DAY, n=3, tag="new")
    # Quarantine and progress keep less: 8 and 3 days old rows go too.
    store.write({"quarantine": [{"origin": "q8:0:0", "reason": "not_json", "raw": "x", "recorded_at": NOW - 8 * DAY}],
                 "pipeline_progress": [{"query": "fleetwatch", "batch_id": 5000, "recorded_at": NOW - 3 * DAY,
                                        "input_rows": 1}]})
    store.record_alerts(map(Alert.from_dict, [_alert("open", "firing", NOW - 45 * DAY)]))  # firing for 45 days: kept
    # What that alert is about, and a target with an alert of its own, both last heard of 45 days
    # ago: kept while their alerts fire.
    store.write(_subjects("c1", range(1, 2), "t-open", NOW - 45 * DAY))
    store.record_alerts(map(Alert.from_dict, [
        {**_alert("unreachable", "firing", NOW - 45 * DAY), "rule": "cluster.unreachable",
         "severity": "critical", "cluster_id": None, "broker_id": None, "target": "t-open"}]))

    deleted = store.delete_expired(RetentionConfig(), now_ms=NOW)

    assert deleted == {"alert_history": 8, "broker_transitions": 4, "controller_history": 4, "alerts": 4,
                       "quarantine": 5, "pipeline_progress": 5, "brokers": 4, "clusters": 1, "targets": 1,
                       "source_clocks": 5}
    assert _counts(store) == {"alert_history": 8, "broker_transitions": 3, "controller_history": 3, "alerts": 5,
                              "quarantine": 3, "pipeline_progress": 3, "brokers": 4, "clusters": 2, "targets": 2,
                              "source_clocks": 3}
    with store.engine.connect() as conn:
        assert conn.execute(select(alerts.c.alert_id, alerts.c.status).where(alerts.c.status == "firing")
                            .order_by(alerts.c.alert_id)).all() == [("open", "firing"), ("unreachable", "firing")]
        assert set(conn.execute(select(brokers.c.cluster_id, brokers.c.broker_id)).all()) == {
            ("c1", 1), ("new-c", 0), ("new-c", 1), ("new-c", 2)}
        assert set(conn.scalars(select(targets.c.target))) == {"t-open", "new-t"}
        assert "open" in set(conn.scalars(select(alert_history.c.alert_id)))
    assert store.delete_expired(RetentionConfig(), now_ms=NOW) == dict.fromkeys(deleted, 0)


def test_a_backlog_is_deleted_in_bounded_rounds(db):
    store = db
    _fill(store, age_ms=40 * DAY, n=12, tag="old")
    retention = RetentionConfig(max_rows_per_table=5)
    rounds = []
    while any((deleted := store.delete_expired(retention, now_ms=NOW)).values()):
        assert max(deleted.values()) <= 5
        rounds.append(deleted)
    assert len(rounds) == 5  # 24 history lines: 5 + 5 + 5 + 5 + 4
    assert _counts(store) == dict.fromkeys((t.name for t in TABLES), 0)


def test_the_retention_deletes_use_indexes(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    plans = {
        "quarantine": "SELECT id FROM quarantine WHERE recorded_at < 5",
        "pipeline_progress": "SELECT id FROM pipeline_progress WHERE recorded_at < 5",
        "broker_transitions": "SELECT id FROM broker_transitions WHERE ts < 5",
        "controller_history": "SELECT id FROM controller_history WHERE ts < 5",
        "alert_history": "SELECT id FROM alert_history WHERE event_ms < 5",
        "alerts": "SELECT alert_id FROM alerts WHERE status = 'resolved' AND ends_at < 5",
        "brokers": "SELECT cluster_id, broker_id FROM brokers WHERE updated_ms < 5",
        "clusters": "SELECT cluster_id FROM clusters WHERE updated_ms < 5",
        "targets": "SELECT target FROM targets WHERE updated_ms < 5",
        "source_clocks": "SELECT source FROM source_clocks WHERE updated_ms < 5",
        # /metrics reads the latest progress row of each query on every scrape.
        "latest progress": "SELECT query, max(id) FROM pipeline_progress GROUP BY query",
    }
    with store.engine.connect() as conn:
        for name, sql in plans.items():
            plan = " ".join(row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}")))
            assert "USING" in plan and "INDEX" in plan, f"{name}: {plan}"


@pytest.mark.spark
def test_the_job_deletes_expired_rows_every_few_batches(spark, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    _fill(store, age_ms=400 * DAY, n=3, tag="old")  # older than any retention, whatever the clock says
    before = _counts(store)
    writer = BatchWriter(store, retention=RetentionConfig(every_batches=3))
    empty = spark.createDataFrame([], OUTPUT_SCHEMA)
    writer(empty, 0)
    writer(empty, 1)
    assert _counts(store) == before
    writer(empty, 2)
    assert _counts(store) == dict.fromkeys(before, 0)
    assert "fleetwatch_retention_deleted_rows_total" in render_metrics(store.engine)
