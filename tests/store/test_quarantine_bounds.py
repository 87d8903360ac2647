"""The quarantine's volume is bounded (issue 42, point 3), on SQLite and a real PostgreSQL: the job's
writer (`BatchWriter`, given its micro-batch's output rows as pandas: `support.micro_batch`) stores
at most `retention.quarantine_rows_per_reason` rows of a reason per micro-batch and counts the rest
(on the rows, on /metrics, on the dashboard's quarantine view), keeps 4 KiB of a message, and holds
the table at `retention.quarantine_max_rows` rows, deleting the oldest.

Before, every rejected or late message was stored whole (up to 1 MiB each), and only retention's
age limit (7 days, 5,000 rows per run) ever deleted any.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
from sqlalchemy import func, select
from support.micro_batch import MicroBatch
from support.promtool import rules_firing

from dashboard.queries.pipeline import quarantine_reasons
from streaming.config import ConfigError, RetentionConfig, load_config
from streaming.metrics import render_metrics
from streaming.metrics.counters import counter_values
from streaming.records.job_output import LateEvent, Refused, Row
from streaming.sinks import BatchWriter
from streaming.store import Store, quarantine

PER_REASON = 100  # retention.quarantine_rows_per_reason's default
MAX_ROWS = 1000
MIB = 1024 * 1024
NOT_STORED = "fleetwatch_quarantine_not_stored_total"


@pytest.fixture
def db(store_url):
    s = Store(store_url)
    yield s
    s.close()


def _rejected(topic_partition: str, offset: int, reason: str, raw: str) -> Row:
    """An output row of the parse stage's quarantine, as the pipeline's stateful stage hands it on."""
    return Refused(f"{topic_partition}:{offset}", reason, "Expecting value: line 1 column 1 (char 0)", raw,
                   None).output()


def _late(offset: int) -> Row:
    event = {"schema": "fleetwatch.event/v1", "type": "broker_heartbeat", "ts": 1, "source": "agent",
             "cluster_id": "c1", "broker_id": 1, "kind": "heartbeat", "broker_epoch": 1}
    return LateEvent(f"fleetwatch.heartbeats:1:{offset}", 1, json.dumps(event)).output()


def _rows(store: Store) -> list[dict]:
    with store.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(quarantine).order_by(quarantine.c.id))]


def test_a_flood_of_one_reason_stores_a_few_rows_counts_the_rest_and_keeps_4_kib_of_each(db):
    writer = BatchWriter(db, retention=RetentionConfig())  # the defaults
    big = "{" + "x" * (MIB - 1)  # a 1 MiB message that is no JSON
    # 5,000 of one reason, in the order Spark's partitions bring them (offsets interleaved);
    # the first three by offset are 1 MiB each.
    flood = [_rejected("fleetwatch.metadata:0", i, "not_json", big if i < 3 else "{" + "y" * 900)
             for i in (*range(4999, 2499, -1), *range(2500))]
    # 300 of one field path whose list index varies: one reason, whatever the index.
    paths = [_rejected("fleetwatch.metadata:1", i, f"wrong_type:brokers[{i}].port", "{}") for i in range(300)]
    late = [_late(i) for i in range(10)]  # under the bound: all stored
    batch = MicroBatch(flood + paths + late)
    counted_before = counter_values().get(NOT_STORED, 0)
    writer(batch, 0)

    rows = _rows(db)
    by_group: dict[str, list[dict]] = {}
    for row in rows:
        by_group.setdefault(row["reason"].split("[")[0], []).append(row)
    assert {group: len(members) for group, members in by_group.items()} == {
        "not_json": PER_REASON, "wrong_type:brokers": PER_REASON, "late_event": 10}
    # The first by offset are stored; the last of them counts the rest.
    assert sorted(int(r["origin"].rsplit(":", 1)[1]) for r in by_group["not_json"]) == list(range(PER_REASON))
    assert sorted(r["not_stored"] or 0 for r in by_group["not_json"]) == [0] * (PER_REASON - 1) + [5000 - PER_REASON]
    assert sum(r["not_stored"] or 0 for r in by_group["wrong_type:brokers"]) == 300 - PER_REASON
    assert all(r["not_stored"] is None for r in by_group["late_event"])
    # 4 KiB of each message, and its size.
    huge = [r for r in rows if r["raw_bytes"] == MIB]
    assert len(huge) == 3
    assert all(r["raw"] == big[:4096] for r in huge)
    assert max(len(r["raw"].encode()) for r in rows) == 4096
    assert all(r["raw_bytes"] == len(r["raw"].encode()) for r in rows if r not in huge)
    assert counter_values()[NOT_STORED] - counted_before == 5000 + 300 - 2 * PER_REASON

    # The dashboard's quarantine view and /metrics count every message, stored or not.
    assert [(r["reason"], type(r["messages"]), r["messages"], r["not_stored"])
            for r in quarantine_reasons(db.engine)] == [
        ("not_json", int, 5000, 5000 - PER_REASON), ("wrong_type:brokers[].port", int, 300, 300 - PER_REASON),
        ("late_event", int, 10, 0)]
    metrics = render_metrics(db.engine)
    assert f'fleetwatch_quarantine_not_stored_messages{{reason="not_json"}} {5000 - PER_REASON}' in metrics
    assert f"{NOT_STORED} " in metrics

    # Spark runs the batch again after a crash: nothing changes.
    writer(batch, 0)
    assert _rows(db) == rows


def test_the_table_keeps_its_newest_rows_up_to_the_cap(db):
    per_reason = 50
    writer = BatchWriter(db, retention=RetentionConfig(quarantine_rows_per_reason=per_reason,
                                                       quarantine_max_rows=MAX_ROWS))
    batches = 2 * MAX_ROWS // per_reason + 5  # twice the cap and more
    for b in range(batches):
        writer(MicroBatch([_rejected(f"fleetwatch.metadata:{b}", i, "not_json", "{") for i in range(200)]), b)
        with db.engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(quarantine)) == min(MAX_ROWS, (b + 1) * per_reason)
    partitions = {r["origin"].rsplit(":", 1)[0] for r in _rows(db)}
    assert partitions == {f"fleetwatch.metadata:{b}" for b in range(batches - MAX_ROWS // per_reason, batches)}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)")
def test_a_flood_held_at_the_cap_still_pages(tmp_path):
    """The table held at its cap: as many rows go as come, and the rows it holds stay level. The
    shipped rule, on what /metrics read from the store after each micro-batch (one every 15 s), still
    pages. Before, it paged on the rows held growing (`delta(fleetwatch_quarantine_messages)`)."""
    store = Store(f"sqlite:///{tmp_path / 'store.db'}")
    per_reason, batches = 50, 100
    writer = BatchWriter(store, retention=RetentionConfig(quarantine_rows_per_reason=per_reason,
                                                          quarantine_max_rows=MAX_ROWS))
    held, stored = [], []
    for b in range(batches):
        writer(MicroBatch([_rejected(f"fleetwatch.metadata:{b}", i, "not_json", "{") for i in range(200)]), b)
        text = render_metrics(store.engine)
        held.append(re.search(r'^fleetwatch_quarantine_messages{reason="not_json"} (\S+)$', text, re.M)[1])
        stored.append(re.search(r"^fleetwatch_quarantine_stored_rows_total (\S+)$", text, re.M)[1])
    store.close()
    at_cap = MAX_ROWS // per_reason  # from this batch on, the table holds MAX_ROWS rows
    assert set(held[at_cap:]) == {str(MAX_ROWS)} and stored[-1] == str(batches * per_reason)
    # 80 batches at the cap: 20 minutes of samples; the rule's window (15 min) sees only the cap.
    series = {'fleetwatch_quarantine_messages{reason="not_json"}': " ".join(held[at_cap:]),
              "fleetwatch_quarantine_stored_rows_total": " ".join(stored[at_cap:])}
    assert rules_firing(tmp_path, series, "19m", ["FleetwatchQuarantineGrowing"]) == ["FleetwatchQuarantineGrowing"]


def test_the_quarantine_bounds_are_settings_with_bounds(tmp_path):
    defaults = RetentionConfig()
    assert (defaults.quarantine_rows_per_reason, defaults.quarantine_max_rows) == (PER_REASON, 50_000)
    path = tmp_path / "fleetwatch.yaml"
    for setting in ("quarantine_rows_per_reason: 0", "quarantine_max_rows: 10", "quarantine_max_rows: 1e12"):
        path.write_text(f"store: {{retention: {{{setting}}}}}\n")
        with pytest.raises(ConfigError, match=rf"store\.retention\.{setting.split(':')[0]}"):
            load_config(path)
