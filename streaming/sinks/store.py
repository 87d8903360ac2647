"""The store: SQLAlchemy Core over SQLite (WAL, the embedded default) or PostgreSQL.

Writers are idempotent (upserts on natural keys), so a micro-batch that Spark replays after
a crash leaves the store as if it had run once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    event,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite

from streaming.detect.alerts import RULES

__all__ = [
    "Store",
    "alert_history",
    "alerts",
    "broker_transitions",
    "brokers",
    "clusters",
    "controller_history",
    "deliveries",
    "metadata",
    "notifier_lease",
    "outbox",
    "pipeline_progress",
    "quarantine",
    "silences",
    "subject_of",
    "targets",
]

metadata = MetaData()

# Current state of every alert (one row per alert_id: firing or resolved).
alerts = Table(
    "alerts", metadata,
    Column("alert_id", String(64), primary_key=True),
    Column("rule", String(64), nullable=False, index=True),
    Column("severity", String(16), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("cluster_id", String(255), index=True),
    Column("target", String(255)),
    Column("broker_id", Integer),
    Column("endpoint", String(512)),
    Column("starts_at", BigInteger, nullable=False),
    Column("ends_at", BigInteger),
    Column("summary", Text, nullable=False),
    Column("details", JSON, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
)

# Every (alert_id, status) ever emitted, with the exact alert object (SPEC section 4).
alert_history = Table(
    "alert_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("event_ms", BigInteger, nullable=False, index=True),
    Column("body", Text, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    UniqueConstraint("alert_id", "status", name="uq_alert_history"),
)

# What the notifier has to deliver: one row per (alert_id, status).
outbox = Table(
    "outbox", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("alert_id", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("subject", String(600), nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger),
    Column("attempts", Integer, nullable=False, default=0),
    Column("last_error", Text),
    UniqueConstraint("alert_id", "status", name="uq_outbox"),
    # The notifier's plan() looks for rows not delivered yet every second; retention for old ones.
    Index("ix_outbox_delivered_at", "delivered_at"),
)

brokers = Table(
    "brokers", metadata,
    Column("cluster_id", String(255), primary_key=True),
    Column("broker_id", Integer, primary_key=True),
    Column("state", String(16)),
    Column("fenced", Boolean),
    Column("broker_epoch", BigInteger),
    Column("last_heartbeat_ms", BigInteger),
    Column("last_answer_ms", BigInteger),
    Column("rack", String(255)),
    Column("endpoints", JSON, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

broker_transitions = Table(
    "broker_transitions", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster_id", String(255), nullable=False),
    Column("broker_id", Integer, nullable=False),
    Column("ts", BigInteger, nullable=False),
    Column("state", String(16), nullable=False),
    Column("previous_state", String(16)),
    Column("reason", Text),
    UniqueConstraint("cluster_id", "broker_id", "ts", "state", name="uq_transition"),
)

clusters = Table(
    "clusters", metadata,
    Column("cluster_id", String(255), primary_key=True),
    Column("target", String(255)),
    Column("controller_id", Integer),
    Column("last_response_ms", BigInteger),
    Column("updated_ms", BigInteger, nullable=False),
)

# Every change of the controller a cluster's responses report (None: no active controller).
controller_history = Table(
    "controller_history", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster_id", String(255), nullable=False, index=True),
    Column("ts", BigInteger, nullable=False),
    Column("controller_id", Integer),
    UniqueConstraint("cluster_id", "ts", name="uq_controller_change"),
)

targets = Table(
    "targets", metadata,
    Column("target", String(255), primary_key=True),
    Column("pinned_cluster_id", String(255)),
    Column("last_cluster_id", String(255)),
    Column("last_ok_ms", BigInteger),
    Column("last_error", String(255)),
    Column("last_error_ms", BigInteger),
    Column("updated_ms", BigInteger, nullable=False),
)

quarantine = Table(
    "quarantine", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("origin", String(512), nullable=False, unique=True),
    Column("reason", String(255), nullable=False, index=True),
    Column("raw", Text),
    Column("recorded_at", BigInteger, nullable=False),
)

pipeline_progress = Table(
    "pipeline_progress", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("query", String(255), nullable=False),
    Column("batch_id", BigInteger, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Column("input_rows", BigInteger, nullable=False),
    Column("input_rows_per_s", JSON),
    Column("processed_rows_per_s", JSON),
    Column("batch_duration_ms", BigInteger),
    Column("watermark_ms", BigInteger),
    Column("state_rows", BigInteger),
    Column("state_memory_bytes", BigInteger),
    UniqueConstraint("query", "batch_id", name="uq_progress"),
)

# The notifier's work (streaming/notify): one row per (outbox row, receiver) chosen by the routes,
# sent in outbox order per (receiver, subject, rule). state: pending (to send at next_attempt_at),
# delivered (after a 2xx), dead (a permanent failure or a retry limit: dead_letter true, the reason
# in last_error), held (a firing held by silence_id, decided again at next_attempt_at, its end),
# silenced (for good, by silence_id) or superseded (a requeued dead firing whose resolution had
# already been delivered). Errors are redacted before they are stored.
deliveries = Table(
    "deliveries", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("outbox_id", Integer, nullable=False, index=True),
    Column("receiver", String(255), nullable=False),
    Column("alert_id", String(64), nullable=False, index=True),
    Column("status", String(16), nullable=False),
    Column("rule", String(64), nullable=False),
    Column("subject", String(600), nullable=False),
    Column("group_key", String(600), nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", BigInteger, nullable=False),
    Column("last_attempt_at", BigInteger),
    Column("last_error", Text),
    Column("dead_letter", Boolean, nullable=False, default=False),
    Column("silence_id", String(64)),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger),
    UniqueConstraint("outbox_id", "receiver", name="uq_delivery"),
    Index("ix_deliveries_due", "receiver", "state", "next_attempt_at"),
    Index("ix_deliveries_queue", "receiver", "subject", "rule", "state", "outbox_id"),
)

# Silences (`fleetwatch silence`): every given matcher must match; ends_at is set to the
# expiry time by `silence expire`.
silences = Table(
    "silences", metadata,
    Column("id", String(64), primary_key=True),
    Column("cluster", String(255)),
    Column("rule", String(255)),
    Column("broker_id", Integer),
    Column("target", String(255)),
    Column("endpoint", String(512)),
    Column("starts_at", BigInteger, nullable=False),
    Column("ends_at", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", String(255)),
    Column("created_at", BigInteger, nullable=False),
    Column("expired_at", BigInteger),
    Index("ix_silences_ends_at", "ends_at"),
)

# One notifier at a time per store (per-subject order): who holds the lease, until when.
notifier_lease = Table(
    "notifier_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("acquired_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)

_UPSERT_KEYS: dict[str, tuple[str, ...]] = {
    "alerts": ("alert_id",),
    "brokers": ("cluster_id", "broker_id"),
    "clusters": ("cluster_id",),
    "targets": ("target",),
}
_INSERT_ONCE_KEYS: dict[str, tuple[str, ...]] = {
    "alert_history": ("alert_id", "status"),
    "outbox": ("alert_id", "status"),
    "broker_transitions": ("cluster_id", "broker_id", "ts", "state"),
    "controller_history": ("cluster_id", "ts"),
    "quarantine": ("origin",),
    "pipeline_progress": ("query", "batch_id"),
    "deliveries": ("outbox_id", "receiver"),
}


def _now_ms() -> int:
    return int(time.time() * 1000)


class Store:
    """Reads and idempotent writes over one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith("sqlite:///") and not url.startswith("sqlite:///:memory:"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, future=True, pool_pre_ping=True)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        # Job, notifier and dashboard often start together: one schema creation at a time.
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7263011)")
            elif self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # the database's write lock, until commit
            metadata.create_all(conn)
            # create_all makes the indexes of new tables only: a store from before an index of the
            # notifier's tables existed gets it here.
            for table in (outbox, deliveries, silences):
                for index in table.indexes:
                    index.create(conn, checkfirst=True)

    def close(self) -> None:
        self.engine.dispose()

    # -- writes ---------------------------------------------------------------------------

    def _insert(self, table: Table):
        dialect = self.engine.dialect.name
        if dialect == "postgresql":
            return postgresql.insert(table)
        if dialect == "sqlite":
            return sqlite.insert(table)
        raise RuntimeError(f"unsupported database {dialect!r}: use SQLite or PostgreSQL")

    @staticmethod
    def _fit_postgresql(table: Table, row: dict[str, Any]) -> dict[str, Any]:
        """PostgreSQL refuses NUL in text and over-long VARCHARs, which SQLite stores as given:
        replace NUL, clip to the column's length, so one odd message cannot fail every retry."""
        out = dict(row)
        for name, value in row.items():
            if isinstance(value, str):
                value = value.replace("\x00", "\ufffd")
                length = getattr(table.c[name].type, "length", None) if name in table.c else None
                out[name] = value[:length] if length else value
        return out

    def _write(self, conn, table: Table, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.engine.dialect.name == "postgresql":
            rows = [self._fit_postgresql(table, row) for row in rows]
        stmt = self._insert(table)
        if table.name in _UPSERT_KEYS:
            keys = _UPSERT_KEYS[table.name]
            stmt = stmt.on_conflict_do_update(
                index_elements=list(keys),
                set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys},
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(_INSERT_ONCE_KEYS[table.name]))
        conn.execute(stmt, rows)

    def write(self, rows_by_table: Mapping[str, Iterable[dict[str, Any]]]) -> None:
        """Write rows of several tables in one transaction."""
        with self.engine.begin() as conn:
            for name, rows in rows_by_table.items():
                self._write(conn, metadata.tables[name], list(rows))

    def record_alerts(self, alert_objects: Iterable[dict[str, Any]]) -> int:
        """Record alert objects (SPEC section 4): current state, history and outbox."""
        now = _now_ms()
        current: dict[str, dict[str, Any]] = {}
        history, box = [], []
        for alert in alert_objects:
            body = json.dumps(alert, sort_keys=True, separators=(",", ":"))
            event_ms = alert["ends_at"] if alert["status"] == "resolved" else alert["starts_at"]
            history.append({"alert_id": alert["alert_id"], "status": alert["status"],
                            "event_ms": event_ms, "body": body, "recorded_at": now})
            box.append({"alert_id": alert["alert_id"], "status": alert["status"],
                        "subject": subject_of(alert), "body": body, "created_at": now,
                        "attempts": 0})
            previous = current.get(alert["alert_id"])
            # A resolution wins over a firing line of the same alert, whatever the order.
            if previous is None or alert["status"] == "resolved":
                current[alert["alert_id"]] = {
                    **{k: alert[k] for k in ("alert_id", "rule", "severity", "status", "cluster_id",
                                             "target", "broker_id", "endpoint", "starts_at",
                                             "ends_at", "summary", "details")},
                    "recorded_at": now,
                }
        with self.engine.begin() as conn:
            # Resolved rows must not be turned back into firing by a replayed firing line.
            resolved_ids = set()
            ids = list(current)
            for start in range(0, len(ids), 500):
                resolved_ids.update(conn.scalars(
                    select(alerts.c.alert_id).where(alerts.c.alert_id.in_(ids[start:start + 500]),
                                                    alerts.c.status == "resolved")))
            self._write(conn, alerts, [r for r in current.values()
                                       if r["status"] == "resolved" or r["alert_id"] not in resolved_ids])
            self._write(conn, alert_history, history)
            self._write(conn, outbox, box)
        return len(history)


def subject_of(alert: Mapping[str, Any]) -> str:
    """The subject an alert is about (SPEC section 4), as one string."""
    kind = RULES[alert["rule"]][1]
    if kind == "broker":
        return f"broker:{alert['cluster_id']}:{alert['broker_id']}"
    if kind in ("target", "endpoint"):
        return f"{kind}:{alert[kind]}"
    return f"cluster:{alert['cluster_id']}"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the dashboard read while the job writes; busy_timeout rides out the writer lock.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()
