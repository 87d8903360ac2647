"""The store: SQLAlchemy Core over SQLite (WAL, the embedded default) or PostgreSQL.

Writers are idempotent (upserts on natural keys), so a micro-batch that Spark replays after
a crash leaves the store as if it had run once. The job writes a micro-batch's rows, alerts
and outbox in one transaction (`write_batch`); SQLite commits with `synchronous=FULL`, so an
outbox row survives a power loss once Spark has committed its batch.

The job also deletes what is older than its retention (`delete_expired`, deploy/README.md) and
resolves the alerts a reset detection state left open (`orphan_open_alerts`,
`resolve_orphaned_alerts`; streaming/detect/README.md, "Checkpoint reset"). An operator resolves a
stuck alert by hand (`resolve_by_hand`, `fleetwatch alerts resolve`), recorded as any resolution.

A resolved alert is final: no later line of it (a replayed firing, detection's resolution after an
operator's) changes its row, its history or its outbox.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import JSON, Engine, Table, create_engine, delete, event, exists, func, inspect, select, tuple_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.sql.compiler import Compiled

from streaming.config import RetentionConfig
from streaming.detect import is_carried_over
from streaming.plumbing import clock
from streaming.plumbing.errors import ConfigError
from streaming.plumbing.resilience import is_transient
from streaming.records.alert import Alert
from streaming.records.contract import MAX_TRACKED_SOURCES

# The notifier's tables join `metadata` when their module is imported: the store creates them too.
from streaming.store import notifier_tables  # noqa: F401
from streaming.store.job_tables import (
    alert_history,
    alerts,
    broker_transitions,
    brokers,
    clusters,
    controller_history,
    job_checkpoints,
    job_restarts,
    metadata,
    outbox,
    pipeline_progress,
    quarantine,
    source_clocks,
    targets,
)
from streaming.store.quarantine_bounds import keep_newest_quarantine
from streaming.store.second_pass_state import SecondPassWrite, read_buckets, write_buckets

__all__ = ["Store"]

_UPSERT_KEYS: dict[str, tuple[str, ...]] = {
    "alerts": ("alert_id",),
    "brokers": ("cluster_id", "broker_id"),
    "clusters": ("cluster_id",),
    "targets": ("target",),
    "job_checkpoints": ("query",),
    "source_clocks": ("source",),
}
# An upsert changes an existing row only while this holds of it: a resolved alert is final. The
# database decides it in the upsert itself (ON CONFLICT ... DO UPDATE ... WHERE), so a writer that
# read the row as firing before another resolved it cannot overwrite that resolution.
_UPSERT_WHILE = {"alerts": alerts.c.status != "resolved"}
# The tables a micro-batch rewrites in bulk (~12,000 broker rows a batch at 1,000 x 12), written by
# `_write_bulk`: SQLAlchemy's processing of each row's parameters took twice SQLite's own work on them
# (180 against 85 ms a batch of 1,000 x 12, issue 45), in the job's serial path. None has a Python-side
# default or an upsert condition, which that path does not apply.
_BULK_TABLES = frozenset({"brokers", "clusters", "targets", "source_clocks"})
_INSERT_ONCE_KEYS: dict[str, tuple[str, ...]] = {
    "alert_history": ("alert_id", "status"),
    "outbox": ("alert_id", "status"),
    "broker_transitions": ("cluster_id", "broker_id", "ts", "state"),
    "controller_history": ("cluster_id", "ts"),
    "quarantine": ("origin",),
    "pipeline_progress": ("query", "batch_id"),
    "deliveries": ("outbox_id", "receiver"),
}


_DAY_MS = 86_400_000

# Tries of the schema creation at start (see Store.__init__).
_SCHEMA_ATTEMPTS = 5


class Store:
    """Reads and idempotent writes over one database URL."""

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = make_url(url)
        # A plain file path gets its folder made; an SQLite URI (`file:...?uri=true`) names its own
        # file and mode, and making its "folder" would leave a `file:` tree in the working directory.
        if (parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
                and parsed.query.get("uri") != "true"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(url, future=True, pool_pre_ping=True)
        self._bulk_statements: dict[tuple[str, tuple[str, ...]], Compiled] = {}
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        # Job, notifier and dashboard often start together: one schema creation at a time. On a new
        # SQLite file, a connection that meets another one switching the file to WAL is told "database
        # is locked" at once, without waiting out busy_timeout (1 run in 15 of six processes starting
        # together): such a transient refusal is tried again, a few times.
        for attempt in range(1, _SCHEMA_ATTEMPTS + 1):
            try:
                self._create_schema()
                break
            except OperationalError as exc:
                if attempt == _SCHEMA_ATTEMPTS or not is_transient(exc):
                    raise
                time.sleep(0.05 * attempt)  # backoff between tries of the schema creation

    def _create_schema(self) -> None:
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7263011)")
            elif self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # the database's write lock, until commit
            metadata.create_all(conn)
            _upgrade(conn)

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
            # An upsert may not name a row twice (PostgreSQL refuses the whole statement): keys that
            # became equal once fitted (clipped, NUL replaced) keep their last row.
            rows = list({tuple(row[k] for k in keys): row for row in rows}.values())
            stmt = stmt.on_conflict_do_update(
                index_elements=list(keys),
                set_={c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys},
                where=_UPSERT_WHILE.get(table.name),
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(_INSERT_ONCE_KEYS[table.name]))
        if table.name in _BULK_TABLES:
            self._write_bulk(conn, table, stmt, rows)
        else:
            conn.execute(stmt, rows)

    def _write_bulk(self, conn, table: Table, stmt, rows: list[dict[str, Any]]) -> None:
        """`stmt` over `rows` by the driver's executemany, compiled once per table and columns (the
        first row's, as SQLAlchemy takes them). JSON values go as compact JSON text (cast to JSON in
        PostgreSQL's statement); the other columns' values are the driver's as they are."""
        columns = tuple(rows[0])
        compiled = self._bulk_statements.get((table.name, columns))
        if compiled is None:
            compiled = self._bulk_statements[(table.name, columns)] = stmt.compile(
                dialect=self.engine.dialect, column_keys=list(columns))
        names = compiled.positiontup or columns  # SQLite's parameters by position, psycopg's by name
        values = operator.itemgetter(*names)
        as_json = [i for i, name in enumerate(names) if isinstance(table.c[name].type, JSON)]
        params: list[Any] = ([_with_json_text(values(row), as_json) for row in rows] if as_json
                             else [values(row) for row in rows])
        if compiled.positiontup is None:
            params = [dict(zip(names, p, strict=True)) for p in params]
        conn.exec_driver_sql(compiled.string, params)

    def write(self, rows_by_table: Mapping[str, Iterable[dict[str, Any]]]) -> None:
        """Write rows of several tables in one transaction."""
        self.write_batch(rows_by_table, ())

    def write_batch(self, rows_by_table: Mapping[str, Iterable[dict[str, Any]]], lines: Iterable[Alert], *,
                    quarantine_max_rows: int | None = None, second_pass: SecondPassWrite | None = None) -> int:
        """Rows of several tables and alerts (`record_alerts`) in one transaction: a micro-batch is in
        the store and the outbox entirely, or not at all. With `quarantine_max_rows`, a write that
        adds quarantine rows deletes the oldest beyond it (`keep_newest_quarantine`); with
        `second_pass`, the detection's second pass's buckets the batch changed go with it
        (second_pass_state.py). Returns the alert lines recorded."""
        with self.engine.begin() as conn:
            if second_pass is not None:
                write_buckets(conn, second_pass)
            written: dict[str, int] = {}
            for name, rows in rows_by_table.items():
                rows = list(rows)
                self._write(conn, metadata.tables[name], rows)
                written[name] = len(rows)
            if written.get("source_clocks"):
                _keep_newest_sources(conn)
            if written.get("quarantine") and quarantine_max_rows is not None:
                keep_newest_quarantine(conn, quarantine_max_rows, written["quarantine"])
            return self._record_alerts(conn, lines)

    def second_pass_buckets(self, query: str, checkpoint_id: str, before_batch: int) -> dict[int, bytes]:
        """The second pass's buckets as the newest batch of the checkpoint before `before_batch` left them."""
        with self.engine.connect() as conn:
            return read_buckets(conn, query, checkpoint_id, before_batch)

    def record_alerts(self, lines: Iterable[Alert]) -> int:
        """Record alert lines: current state, history and outbox."""
        with self.engine.begin() as conn:
            return self._record_alerts(conn, lines)

    def _record_alerts(self, conn, lines: Iterable[Alert]) -> int:
        now = clock.now_ms()
        current: dict[str, dict[str, Any]] = {}
        history, box = [], []
        for alert in lines:
            body = alert.stored_body()
            history.append({"alert_id": alert.alert_id, "status": alert.status,
                            "event_ms": alert.event_ms, "body": body, "recorded_at": now})
            box.append({"alert_id": alert.alert_id, "status": alert.status,
                        "subject": alert.queue_subject, "body": body, "created_at": now,
                        "attempts": 0})
            previous = current.get(alert.alert_id)
            # A resolution wins over a firing line of the same alert, whatever the order.
            if previous is None or alert.status == "resolved":
                current[alert.alert_id] = {
                    **{k: v for k, v in alert.to_dict().items() if k != "schema"},
                    "recorded_at": now,
                    # Fired (again) or resolved by the detection state now running.
                    "orphaned_at": None,
                    "carried_over_at": None,
                }
        # A row already resolved stays as it is (`_UPSERT_WHILE`): a replayed firing line does not
        # reopen it, a second resolution (detection's after an operator's) does not rewrite it.
        self._write(conn, alerts, list(current.values()))
        self._write(conn, alert_history, history)
        self._write(conn, outbox, box)
        return len(history)

    def resolve_by_hand(self, alert_id: str, at: int, *, reason: str, resolved_by: str | None) -> Alert:
        """Resolve the firing alert `alert_id` at `at` for an operator: `details.reason` and
        `details.resolved_by` say why and who; its row, history and outbox are written as any
        resolution's (the notifier delivers it). A ConfigError (one line) for an id the store does
        not know or an alert already resolved. The row is locked from the check to the write: a
        resolution detection records meanwhile waits, then changes nothing (`_UPSERT_WHILE`)."""
        with self.engine.begin() as conn:
            if self.engine.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # the database's write lock, until commit
            row = conn.execute(select(alerts).where(alerts.c.alert_id == alert_id).with_for_update()
                               ).mappings().first()
            if row is None:
                raise ConfigError(f"no alert with id {alert_id!r} (see `fleetwatch alerts list`)")
            if row["status"] == "resolved":
                ended = clock.iso_ms(row["ends_at"]) if row["ends_at"] is not None else "an unknown time"
                raise ConfigError(f"alert {alert_id} is already resolved (ended {ended})")
            resolution = _alert_of(row).resolved_at(at, reason=reason, resolved_by=resolved_by)
            self._record_alerts(conn, [resolution])
        return resolution

    def alerts_newest_first(self, *, firing_only: bool, limit: int) -> list[Alert]:
        """The alerts (their current state), the newest started first, at most `limit`; with
        `firing_only`, the firing ones only."""
        stmt = select(alerts).order_by(alerts.c.starts_at.desc(), alerts.c.alert_id).limit(limit)
        if firing_only:
            stmt = stmt.where(alerts.c.status == "firing")
        with self.engine.connect() as conn:
            return [_alert_of(row) for row in conn.execute(stmt).mappings()]

    # -- the detection state's checkpoint ---------------------------------------------------

    def checkpoint_of(self, query: str) -> str | None:
        """The id of the Spark checkpoint whose batches the store last recorded for `query`."""
        with self.engine.connect() as conn:
            return conn.scalar(select(job_checkpoints.c.checkpoint_id).where(job_checkpoints.c.query == query))

    def count_restart(self, query: str, error: str, failed_at: int) -> int:
        """Count one restart of `query` after its failure at `failed_at` (epoch ms) with `error` (one
        line); returns its restarts so far, over every run of the job."""
        stmt = self._insert(job_restarts).values(query=query, restarts=1, last_failure_ms=failed_at, last_error=error)
        stmt = stmt.on_conflict_do_update(index_elements=["query"], set_={
            "restarts": job_restarts.c.restarts + 1, "last_failure_ms": failed_at, "last_error": error})
        with self.engine.begin() as conn:
            conn.execute(stmt)
            return int(conn.scalar(select(job_restarts.c.restarts).where(job_restarts.c.query == query)))

    def orphan_open_alerts(self, now_ms: int | None = None) -> int:
        """Mark every firing alert as orphaned at `now_ms`: the detection state that would resolve
        it is gone. Returns how many."""
        at = clock.now_ms() if now_ms is None else now_ms
        with self.engine.begin() as conn:
            return conn.execute(alerts.update().where(alerts.c.status == "firing").values(orphaned_at=at)).rowcount

    def orphaned_since(self) -> int | None:
        """When the firing alerts still orphaned were orphaned (the earliest), or None."""
        with self.engine.connect() as conn:
            return conn.scalar(select(func.min(alerts.c.orphaned_at)).where(alerts.c.status == "firing"))

    def resolve_orphaned_alerts(self, reason: str, ends_at: int, *,
                                evidence_since: int | None) -> tuple[list[Alert], int]:
        """Settle the firing alerts still orphaned: those that started at or after `evidence_since`
        (the oldest telemetry the new detection state read) are resolved (current state, history
        and outbox, so receivers get the resolve) at `ends_at` with `details.reason`; the older ones
        are carried over (`carried_over_at` = `ends_at`): stay firing. Returns the resolutions and
        how many were carried over."""
        orphaned = (alerts.c.status == "firing") & alerts.c.orphaned_at.is_not(None)
        with self.engine.begin() as conn:
            orphans = conn.execute(select(alerts).where(orphaned)
                                   .order_by(alerts.c.starts_at, alerts.c.alert_id)).mappings().all()
            resolved, carried = [], []
            for row in orphans:
                alert = _alert_of(row)
                if is_carried_over(alert.starts_at, evidence_since):
                    carried.append(alert.alert_id)
                else:
                    resolved.append(alert.resolved_at(ends_at, reason=reason))
            self._record_alerts(conn, resolved)
            if carried:
                conn.execute(alerts.update().where(alerts.c.alert_id.in_(carried)).values(
                    orphaned_at=None, carried_over_at=func.coalesce(alerts.c.carried_over_at, ends_at)))
        return resolved, len(carried)

    def carried_over_alerts(self) -> list[Alert]:
        """The firing alerts carried over a reset of the detection state (`resolve_orphaned_alerts`)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(alerts).where(alerts.c.status == "firing",
                                                     alerts.c.carried_over_at.is_not(None))
                                .order_by(alerts.c.starts_at, alerts.c.alert_id)).mappings().all()
        return [_alert_of(row) for row in rows]

    # -- retention --------------------------------------------------------------------------

    def delete_expired(self, retention: RetentionConfig, now_ms: int | None = None) -> dict[str, int]:
        """Delete what is older than the retention, at most `retention.max_rows_per_table` rows per
        table, in chunks of short transactions (the job calls this every few batches, so a backlog
        goes over several calls). Age is event time where the row has one (history, resolved alerts,
        brokers, clusters, targets), else the time it was recorded (quarantine, progress, source clocks). The history
        of a firing alert is kept, and so are the broker, cluster and target it is about.
        Returns the rows deleted per table."""
        now = clock.now_ms() if now_ms is None else now_ms
        limit = retention.max_rows_per_table

        def cutoff(days: float) -> int:
            return now - int(days * _DAY_MS)

        history_cutoff = cutoff(retention.history_days)
        subjects_cutoff = cutoff(retention.subjects_days)
        firing = alerts.c.status == "firing"
        history_firing = exists().where(alerts.c.alert_id == alert_history.c.alert_id, firing)
        plans = [
            (alert_history, (alert_history.c.id,), (alert_history.c.event_ms < history_cutoff) & ~history_firing),
            (broker_transitions, (broker_transitions.c.id,), broker_transitions.c.ts < history_cutoff),
            (controller_history, (controller_history.c.id,), controller_history.c.ts < history_cutoff),
            (alerts, (alerts.c.alert_id,),
             (alerts.c.status == "resolved") & (alerts.c.ends_at < cutoff(retention.resolved_alerts_days))),
            (quarantine, (quarantine.c.id,), quarantine.c.recorded_at < cutoff(retention.quarantine_days)),
            (pipeline_progress, (pipeline_progress.c.id,),
             pipeline_progress.c.recorded_at < cutoff(retention.progress_days)),
            # What the fleet no longer reports (a decommissioned cluster, an id nobody sends again),
            # unless an alert about it still fires.
            (brokers, (brokers.c.cluster_id, brokers.c.broker_id),
             (brokers.c.updated_ms < subjects_cutoff) & ~exists().where(
                 firing, alerts.c.cluster_id == brokers.c.cluster_id, alerts.c.broker_id == brokers.c.broker_id)),
            (clusters, (clusters.c.cluster_id,),
             (clusters.c.updated_ms < subjects_cutoff) & ~exists().where(
                 firing, alerts.c.cluster_id == clusters.c.cluster_id)),
            (targets, (targets.c.target,),
             (targets.c.updated_ms < subjects_cutoff) & ~exists().where(firing, alerts.c.target == targets.c.target)),
            (source_clocks, (source_clocks.c.source,), source_clocks.c.updated_ms < subjects_cutoff),
        ]
        chunk = min(limit, 1000)  # one short transaction each: the writer lock is held briefly
        deleted: dict[str, int] = {}
        for table, key, expired in plans:
            total = 0
            while total < limit:
                with self.engine.begin() as conn:
                    ids = conn.execute(select(*key).where(expired).limit(min(chunk, limit - total))).all()
                    if ids:
                        conn.execute(delete(table).where(tuple_(*key).in_([tuple(i) for i in ids])))
                total += len(ids)
                if len(ids) < chunk:
                    break
            deleted[table.name] = total
        return deleted


def _alert_of(row: Mapping[str, Any]) -> Alert:
    return Alert.from_dict({**row, "details": row["details"] or {}})


def _keep_newest_sources(conn) -> None:
    """At most MAX_TRACKED_SOURCES rows in `source_clocks`: those heard from last (and, among
    them, the ones whose clocks lead the most), so a flood of made-up source ids cannot grow it."""
    if conn.scalar(select(func.count()).select_from(source_clocks)) <= MAX_TRACKED_SOURCES:
        return
    kept = (select(source_clocks.c.source)
            .order_by(source_clocks.c.updated_ms.desc(), source_clocks.c.lead_ms.desc(), source_clocks.c.source)
            .limit(MAX_TRACKED_SOURCES))
    conn.execute(delete(source_clocks).where(source_clocks.c.source.not_in(kept.scalar_subquery())))


def _upgrade(conn) -> None:
    """Add the nullable columns and the indexes that a store made by an older version lacks (the
    job's tables and the notifier's: create_all makes the indexes of new tables only)."""
    found = inspect(conn)
    for table in metadata.sorted_tables:
        have = {c["name"] for c in found.get_columns(table.name)}
        for column in table.columns:
            if column.name not in have:
                assert column.nullable, f"{table.name}.{column.name}: only nullable columns can be added"
                kind = column.type.compile(dialect=conn.dialect)
                conn.exec_driver_sql(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}')
        indexes = {i["name"] for i in found.get_indexes(table.name)}
        for index in table.indexes:
            if index.name not in indexes:
                index.create(conn)


def _with_json_text(values: tuple[Any, ...], at: list[int]) -> tuple[Any, ...]:
    """`values` with those `at` written as compact JSON (None too: JSON's null, as SQLAlchemy writes it)."""
    out = list(values)
    for i in at:
        out[i] = orjson.dumps(out[i]).decode()
    return tuple(out)


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    # WAL lets the dashboard read while the job writes; busy_timeout rides out the writer lock.
    # synchronous=FULL: in WAL mode NORMAL may lose the last commits on a power loss, and the job's
    # last commit may be an outbox row of a batch that Spark has already committed (never re-run).
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()
