"""A reset of the detection state settles the alerts open before it (streaming/detect/README.md,
"Checkpoint reset"): the job's writer over real micro-batches (Spark DataFrames of the job's output
rows) and a real store, on SQLite and PostgreSQL.

An alert that started before the oldest telemetry the new state read (its evidence is gone from the
bus) is carried over, firing, not resolved; it ends when the new state shows its subject healthy or
fires it again. An alert the new state could have fired again and did not is resolved.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from streaming.pipeline.state import OUTPUT_SCHEMA
from streaming.records.alert import Alert
from streaming.records.job_output import Kind, StateRow, alert_row, mark_row
from streaming.sinks.batch_writer import RESET_REASON, BatchWriter
from streaming.store import Store, alerts, outbox

pytestmark = pytest.mark.spark

T0 = 1_790_000_000_000
HOUR = 3_600_000
RESET = T0 + 5 * HOUR
BUS_HOLDS_FROM = T0 + 2 * HOUR  # the oldest event the new state reads: the bus's retention


def _firing(rule: str, cluster_id: str, broker_id: int, at: int) -> Alert:
    return Alert.firing(rule, f"{cluster_id}/{broker_id}", at, f"{rule} {cluster_id}/{broker_id}",
                        cluster_id=cluster_id, broker_id=broker_id)


def _batch(spark, *, alerts_fired=(), brokers=(), earliest=None, watermark=RESET + 1):
    rows = [alert_row(a) for a in alerts_fired]
    rows += [StateRow.of(Kind.BROKER, b).output() for b in brokers]
    if earliest is not None:
        rows.append(mark_row(Kind.EARLIEST_EVENT, earliest))
    rows.append(mark_row(Kind.WATERMARK, watermark))
    return spark.createDataFrame(rows, OUTPUT_SCHEMA)


def _broker(cluster_id: str, broker_id: int, heartbeat_ms: int) -> dict:
    return {"cluster_id": cluster_id, "broker_id": broker_id, "state": "ONLINE", "fenced": False,
            "broker_epoch": 7, "last_heartbeat_ms": heartbeat_ms, "last_answer_ms": heartbeat_ms, "rack": None,
            "endpoints": [], "updated_ms": heartbeat_ms}


def _rows(store: Store) -> dict[str, tuple]:
    with store.engine.connect() as conn:
        return {r.alert_id: (r.status, r.orphaned_at, r.carried_over_at, r.ends_at, r.details.get("reason"))
                for r in conn.execute(select(alerts))}


def _sent(store: Store) -> list[tuple[str, str]]:
    with store.engine.connect() as conn:
        return sorted(conn.execute(select(outbox.c.alert_id, outbox.c.status)).all())


def test_an_alert_older_than_the_bus_is_carried_over_a_reset_until_the_new_state_ends_it(spark, store_url):
    store = Store(store_url)
    lost = _firing("broker.heartbeat_lost", "c1", 1, T0)  # its broker's heartbeats are gone from the bus
    fenced = _firing("broker.fenced", "c2", 3, T0 + HOUR)  # as old
    recent = _firing("broker.heartbeat_lost", "c1", 2, T0 + 3 * HOUR)  # the bus holds what fired it
    store.record_alerts([lost, fenced, recent])
    assert store.orphan_open_alerts(now_ms=RESET) == 3
    handed_on: list[Alert] = []
    writer = BatchWriter(store, orphaned_since=store.orphaned_since(),
                         on_alerts=lambda keyed: handed_on.extend(a for _, a in keyed))

    # The new state read the bus from BUS_HOLDS_FROM and its watermark passed the reset without
    # firing any of the three: the recent one is resolved, the two older ones stay firing.
    writer(_batch(spark, earliest=BUS_HOLDS_FROM + 60_000), 0)
    writer(_batch(spark, earliest=BUS_HOLDS_FROM), 1)  # the oldest event may come in any batch
    writer(_batch(spark, earliest=BUS_HOLDS_FROM + 30_000, watermark=RESET + 2), 2)
    rows = _rows(store)
    assert rows[recent.alert_id] == ("resolved", None, None, RESET, RESET_REASON)
    assert rows[lost.alert_id] == ("firing", None, RESET, None, None)
    assert rows[fenced.alert_id] == ("firing", None, RESET, None, None)
    assert [(a.alert_id, a.status) for a in handed_on] == [(recent.alert_id, "resolved")]
    assert store.orphaned_since() is None  # a restart of the job does not settle them again

    # The job restarts on its checkpoint (a new writer): the carried-over alerts are in the store.
    # The new state shows broker c1/1 heartbeating, and fires broker.fenced of c2/3 anew.
    handed_on.clear()
    again = _firing("broker.fenced", "c2", 3, RESET + 10_000)
    heartbeat = RESET + 20_000
    restarted = BatchWriter(store, on_alerts=lambda keyed: handed_on.extend(a for _, a in keyed))
    restarted(_batch(spark, alerts_fired=[again], brokers=[_broker("c1", 1, heartbeat), _broker("c9", 1, heartbeat)],
                     earliest=RESET, watermark=RESET + 30_000), 3)
    rows = _rows(store)
    status, orphaned, carried, ends_at, reason = rows[lost.alert_id]
    assert (status, ends_at, orphaned, carried) == ("resolved", heartbeat, None, None)
    assert reason.startswith("carried over a detection state reset; the new state shows its subject healthy")
    status, _, carried, ends_at, reason = rows[fenced.alert_id]
    assert (status, ends_at, carried) == ("resolved", again.starts_at, None)
    assert reason.endswith(f"fires it again as alert {again.alert_id}")
    assert rows[again.alert_id][:3] == ("firing", None, None)
    assert sorted((a.alert_id, a.status) for a in handed_on) == sorted(
        [(again.alert_id, "firing"), (lost.alert_id, "resolved"), (fenced.alert_id, "resolved")])
    assert _sent(store) == sorted([(a.alert_id, "firing") for a in (lost, fenced, recent, again)]
                                  + [(a.alert_id, "resolved") for a in (lost, fenced, recent)])


def test_a_carried_over_alert_the_new_state_fires_again_with_its_id_is_no_longer_carried(spark, store_url):
    store = Store(store_url)
    old = _firing("broker.heartbeat_lost", "c1", 1, T0)
    store.record_alerts([old])
    store.orphan_open_alerts(now_ms=RESET)
    writer = BatchWriter(store, orphaned_since=store.orphaned_since())
    writer(_batch(spark, earliest=BUS_HOLDS_FROM), 0)
    assert _rows(store)[old.alert_id][:3] == ("firing", None, RESET)
    # A late replay of the bus's older data (another bus with more history) fires the same alert.
    writer(_batch(spark, alerts_fired=[old], brokers=[_broker("c1", 1, T0 + 10)], watermark=RESET + 5), 1)
    assert _rows(store)[old.alert_id][:3] == ("firing", None, None)
    writer(_batch(spark, brokers=[_broker("c1", 1, RESET + 10)], watermark=RESET + 20), 2)
    assert _rows(store)[old.alert_id][0] == "firing"  # its own state resolves it, not the carry-over
