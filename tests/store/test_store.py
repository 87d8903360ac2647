"""The store against both databases it supports: SQLite (a file) and a real PostgreSQL.

PostgreSQL comes from the Debian package (`postgresql`): a server is started for the session on
127.0.0.1 in a temporary directory, and every test gets a fresh database. Without its binaries the
PostgreSQL cases are skipped, saying so.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import create_engine, func, inspect, select

from streaming.records.alert import Alert
from streaming.records.contract import MAX_TRACKED_SOURCES
from streaming.store import (
    Store,
    alert_history,
    alerts,
    broker_transitions,
    brokers,
    clusters,
    job_restarts,
    outbox,
    pipeline_progress,
    quarantine,
    source_clocks,
    targets,
)


@pytest.fixture
def store(store_url):
    s = Store(store_url)
    yield s
    s.close()


def _count(store: Store, table) -> int:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(table))


def _broker(**over):
    row = {"cluster_id": "c1", "broker_id": 1, "state": "ONLINE", "fenced": False, "broker_epoch": 10,
           "last_heartbeat_ms": 1000, "last_answer_ms": None, "rack": "a",
           "endpoints": [{"host": "b1", "port": 9092}], "updated_ms": 1000}
    return {**row, **over}


def _alert(alert_id="a1", status="firing", **over):
    alert = {"schema": "fleetwatch.alert/v1", "alert_id": alert_id, "rule": "broker.fenced", "status": status,
             "severity": "warning", "cluster_id": "c1", "target": "pay", "broker_id": 3, "endpoint": None,
             "starts_at": 1000, "ends_at": 5000 if status == "resolved" else None, "summary": "broker 3 fenced",
             "details": {"fenced_since_ms": 1000, "why": ["heartbeat"]}}
    return {**alert, **over}


def test_writes_are_idempotent_and_upserts_keep_the_latest(store):
    batch = {
        "brokers": [_broker(), _broker(broker_id=2)],
        "clusters": [{"cluster_id": "c1", "target": "pay", "controller_id": 1, "last_response_ms": 900,
                      "updated_ms": 1000}],
        "targets": [{"target": "pay", "pinned_cluster_id": "c1", "last_cluster_id": "c1", "last_ok_ms": 900,
                     "last_error": None, "last_error_ms": None, "updated_ms": 1000}],
        "broker_transitions": [{"cluster_id": "c1", "broker_id": 1, "ts": 1000, "state": "ONLINE",
                                "previous_state": "FENCED", "reason": None}],
        "quarantine": [{"origin": "fleetwatch.metadata:0:7", "reason": "not_json", "raw": "{", "recorded_at": 1}],
        "pipeline_progress": [{"query": "fleetwatch", "batch_id": 0, "recorded_at": 1, "input_rows": 5,
                               "input_rows_per_s": 2.5, "processed_rows_per_s": None, "batch_duration_ms": 800,
                               "watermark_ms": 995, "state_rows": 3, "state_memory_bytes": 1024}],
    }
    store.write(batch)
    store.write(batch)  # a micro-batch that Spark replays after a crash
    for table, n in ((brokers, 2), (clusters, 1), (targets, 1), (broker_transitions, 1), (quarantine, 1),
                     (pipeline_progress, 1)):
        assert _count(store, table) == n, table.name

    store.write({"brokers": [_broker(state="FENCED", fenced=True, broker_epoch=11, updated_ms=2000,
                                     endpoints=[{"host": "b1-new", "port": 9093}])],
                 "clusters": [{"cluster_id": "c1", "target": "pay", "controller_id": None, "last_response_ms": 1900,
                               "updated_ms": 2000}]})
    with store.engine.connect() as conn:
        row = conn.execute(select(brokers).where(brokers.c.broker_id == 1)).one()
        assert (row.state, row.fenced, row.broker_epoch, row.updated_ms) == ("FENCED", True, 11, 2000)
        assert row.endpoints == [{"host": "b1-new", "port": 9093}]  # JSON round trip
        assert conn.scalar(select(clusters.c.controller_id)) is None
        assert conn.scalar(select(pipeline_progress.c.input_rows_per_s)) == 2.5
    assert _count(store, brokers) == 2


def test_an_upsert_batch_may_name_a_key_twice(store):
    store.write({"brokers": [_broker(state="FENCED", updated_ms=1000), _broker(state="ONLINE", updated_ms=2000)]})
    with store.engine.connect() as conn:
        assert conn.execute(select(brokers.c.state, brokers.c.updated_ms)).all() == [("ONLINE", 2000)]


def test_a_later_write_of_other_columns_writes_them_by_name(store):
    # The snapshot tables are written by a statement compiled once per set of columns.
    store.write({"brokers": [_broker(broker_epoch=10, rack="a")]})
    older = {k: v for k, v in _broker(broker_epoch=12, updated_ms=2000).items() if k not in ("rack", "last_answer_ms")}
    store.write({"brokers": [older]})
    store.write({"brokers": [_broker(broker_id=2, broker_epoch=20, rack="b", endpoints=None)]})
    with store.engine.connect() as conn:
        rows = conn.execute(select(brokers.c.broker_id, brokers.c.broker_epoch, brokers.c.rack, brokers.c.endpoints,
                                   brokers.c.updated_ms).order_by(brokers.c.broker_id)).all()
    assert rows == [(1, 12, None, [{"host": "b1", "port": 9092}], 2000), (2, 20, "b", None, 1000)]


def test_record_alerts_history_outbox_and_resolution(store):
    assert store.record_alerts(map(Alert.from_dict, [_alert()])) == 1
    assert store.record_alerts(map(Alert.from_dict, [_alert()])) == 1  # replayed: nothing new
    assert (_count(store, alerts), _count(store, alert_history), _count(store, outbox)) == (1, 1, 1)

    store.record_alerts(map(Alert.from_dict, [_alert(status="resolved")]))
    store.record_alerts(map(Alert.from_dict, [_alert()]))  # a replayed firing line must not reopen it
    with store.engine.connect() as conn:
        row = conn.execute(select(alerts)).one()
        assert (row.status, row.ends_at) == ("resolved", 5000)
        assert row.details == {"fenced_since_ms": 1000, "why": ["heartbeat"]}
        assert sorted(conn.execute(select(alert_history.c.status)).scalars()) == ["firing", "resolved"]
        assert conn.scalar(select(outbox.c.subject).where(outbox.c.status == "resolved")) == "broker:c1:3"
    assert _count(store, outbox) == 2

    # Both lines of one alert in one batch, in either order: the resolution wins.
    store.record_alerts(map(Alert.from_dict, [_alert("a2", "resolved"), _alert("a2")]))
    store.record_alerts(map(Alert.from_dict, [_alert("a3"), _alert("a3", "resolved")]))
    with store.engine.connect() as conn:
        got = dict(conn.execute(select(alerts.c.alert_id, alerts.c.status).where(alerts.c.alert_id != "a1")).all())
    assert got == {"a2": "resolved", "a3": "resolved"}


def test_odd_input_is_stored_not_fatal(store):
    """What SQLite stores as given must not fail a batch (and so every retry of it) on PostgreSQL."""
    long_id = "x" * 300  # over the 255 characters of the id columns
    store.write({
        "quarantine": [{"origin": "fleetwatch.heartbeats:0:1", "reason": "not_json", "raw": "\x00{garbage",
                        "recorded_at": 1}],
        "clusters": [{"cluster_id": long_id, "target": "t\x00", "controller_id": 1, "last_response_ms": 1,
                      "updated_ms": 1}],
    })
    store.record_alerts(map(Alert.from_dict, [
        _alert(details={"raw": "nul \x00 inside JSON"}, summary="nul \x00 in text")]))
    with store.engine.connect() as conn:
        raw = conn.scalar(select(quarantine.c.raw))
        assert raw.endswith("{garbage") and len(raw) == len("\x00{garbage")
        assert conn.scalar(select(func.count()).select_from(clusters)) == 1
        assert conn.scalar(select(alerts.c.details))["raw"].startswith("nul ")


def test_processes_starting_together_create_the_schema_once(store_url):
    errors: list[BaseException] = []

    def open_store():
        try:
            Store(store_url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors


def test_dashboard_queries_run_on_the_store(store):
    """The dashboard's SQL (unions, window functions, CASE) on each database, over a little data."""
    fleet_queries = pytest.importorskip("dashboard.queries.fleet")
    cluster_queries = pytest.importorskip("dashboard.queries.cluster")
    alert_queries = pytest.importorskip("dashboard.queries.alerts")
    pipeline_queries = pytest.importorskip("dashboard.queries.pipeline")
    store.write({"brokers": [_broker(), _broker(broker_id=2, state="FENCED", fenced=True)],
                 "clusters": [{"cluster_id": "c1", "target": "pay", "controller_id": 1, "last_response_ms": 900,
                               "updated_ms": 1000}],
                 "broker_transitions": [{"cluster_id": "c1", "broker_id": 2, "ts": t, "state": s,
                                         "previous_state": None, "reason": None}
                                        for t, s in ((100, "ONLINE"), (500, "FENCED"))]})
    store.record_alerts(map(Alert.from_dict, [_alert()]))
    engine = store.engine
    assert fleet_queries.fleet_summary(engine)["brokers"] == {"ONLINE": 1, "FENCED": 1}
    overview = fleet_queries.fleet_overview(engine, "pa")
    assert [(r["cluster_id"], r["firing"], r["severity"]) for r in overview] == [("c1", 1, "warning")]
    assert cluster_queries.cluster_info(engine, "c1")["target"] == "pay"
    assert len(cluster_queries.cluster_brokers(engine, "c1")) == 2
    assert [a["alert_id"] for a in alert_queries.alert_list(engine, "firing", cluster="c1")] == ["a1"]
    assert alert_queries.alert_rules(engine) == ["broker.fenced"]
    assert list(cluster_queries.broker_timeline(engine, "c1")["state"]) == ["ONLINE", "FENCED"]
    pipeline_queries.pipeline_batches(engine)
    pipeline_queries.quarantine_reasons(engine)
    assert pipeline_queries.outbox_backlog(engine)["pending"] == 1


def test_sqlite_commits_survive_a_power_loss(tmp_path):
    # WAL with synchronous=NORMAL may lose the last commits on a power loss: the job's last commit
    # can be the outbox row of a batch Spark has already committed, which is never re-run.
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
    store.close()


def test_ids_that_collide_once_fitted_do_not_fail_the_upsert(store):
    # PostgreSQL clips to the column and replaces NUL: two keys can become one, and an upsert that
    # names a row twice fails as a whole (CardinalityViolation), every retry of it too.
    prefix = "p" * 255
    store.write({
        "clusters": [{"cluster_id": prefix + "-one", "target": "a", "controller_id": 1, "last_response_ms": 1,
                      "updated_ms": 1},
                     {"cluster_id": prefix + "-two", "target": "b", "controller_id": 2, "last_response_ms": 2,
                      "updated_ms": 2}],
        "brokers": [_broker(cluster_id="c\x00"), _broker(cluster_id="c\ufffd")],
    })
    assert _count(store, clusters) == (1 if store.engine.dialect.name == "postgresql" else 2)


def test_a_batch_is_stored_whole_or_not_at_all(store):
    broken = _alert(rule="no.such.rule")  # fails after the rows of the batch were written
    with pytest.raises(KeyError):
        store.write_batch({"brokers": [_broker()], "quarantine": [
            {"origin": "t:0:1", "reason": "not_json", "raw": "x", "recorded_at": 1}]},
            map(Alert.from_dict, [_alert(), broken]))
    assert (_count(store, brokers), _count(store, quarantine), _count(store, alerts), _count(store, outbox)) == (
        0, 0, 0, 0)
    assert store.write_batch({"brokers": [_broker()]}, map(Alert.from_dict, [_alert()])) == 1
    assert (_count(store, brokers), _count(store, alerts), _count(store, outbox)) == (1, 1, 1)


def test_a_store_made_by_an_older_version_gets_the_new_columns_and_indexes(store_url):
    Store(store_url).close()
    old = create_engine(store_url)
    with old.begin() as conn:  # as the previous version created them
        conn.exec_driver_sql("DROP INDEX ix_quarantine_recorded_at")
        conn.exec_driver_sql("DROP INDEX ix_broker_transitions_ts")
        conn.exec_driver_sql("ALTER TABLE quarantine DROP COLUMN detail")
        conn.exec_driver_sql("ALTER TABLE alerts DROP COLUMN orphaned_at")
        conn.exec_driver_sql("DROP TABLE job_checkpoints")
    old.dispose()
    store = Store(store_url)
    try:
        found = inspect(store.engine)
        assert "detail" in {c["name"] for c in found.get_columns("quarantine")}
        assert "orphaned_at" in {c["name"] for c in found.get_columns("alerts")}
        assert "ix_quarantine_recorded_at" in {i["name"] for i in found.get_indexes("quarantine")}
        assert "ix_broker_transitions_ts" in {i["name"] for i in found.get_indexes("broker_transitions")}
        store.write({"quarantine": [{"origin": "t:0:1", "reason": "ts_out_of_range", "detail": "in the future: x",
                                     "raw": "{}", "recorded_at": 1}]})
        assert store.checkpoint_of("fleetwatch") is None
    finally:
        store.close()


def test_query_restarts_are_counted_up_per_query_over_runs(store_url):
    assert Store(store_url).count_restart("fleetwatch", "java.lang.NullPointerException: x", 1_000) == 1
    assert Store(store_url).count_restart("fleetwatch", "org.apache.spark.SparkException: y", 2_000) == 2
    assert Store(store_url).count_restart("other", "z", 3_000) == 1
    with Store(store_url).engine.connect() as conn:
        rows = {r.query: (r.restarts, r.last_failure_ms, r.last_error) for r in conn.execute(select(job_restarts))}
    assert rows == {"fleetwatch": (2, 2_000, "org.apache.spark.SparkException: y"), "other": (1, 3_000, "z")}


def test_source_clocks_keep_the_sources_heard_of_last_at_most_the_cap(store_url):
    # A source id is whatever a producer writes: a flood of new ones must not grow the table, and
    # the batch that names a source again updates its row (idempotent: a re-run batch changes nothing).
    store = Store(store_url)
    try:
        def clocks(at: int, names: list[str], lead_ms: int = -300) -> dict:
            return {"source_clocks": [{"source": name, "lead_ms": lead_ms, "events": 2, "ahead": 0, "updated_ms": at}
                                      for name in names]}

        old = [f"agent-old-{i}" for i in range(MAX_TRACKED_SOURCES - 10)]
        store.write_batch(clocks(1, old), ())
        store.write_batch(clocks(2, ["agent-fast"], lead_ms=9_800), ())
        flood = [f"x{i:05}" + "y" * 240 for i in range(50)]
        for _ in range(2):  # the same batch twice
            store.write_batch(clocks(3, flood), ())
        with store.engine.connect() as conn:
            kept = dict(conn.execute(select(source_clocks.c.source, source_clocks.c.updated_ms)).all())
        assert len(kept) == MAX_TRACKED_SOURCES
        assert set(flood) <= kept.keys() and kept["agent-fast"] == 2  # the newest stay
        assert sum(name.startswith("agent-old-") for name in kept) == MAX_TRACKED_SOURCES - 51
    finally:
        store.close()
