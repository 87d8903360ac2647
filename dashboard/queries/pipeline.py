"""The pipeline page's queries: micro-batch progress, quarantine by reason, the collectors' clocks,
the notifier's outbox."""

from __future__ import annotations

from sqlalchemy import Engine, case, func, select

from dashboard.queries.shared import Row, fetch_rows
from streaming.records.contract import AHEAD_REASONS
from streaming.store import outbox, pipeline_progress, quarantine, reason_group, source_clocks

__all__ = ["outbox_backlog", "pipeline_batches", "pipeline_series", "quarantine_reasons", "source_clock_rows"]


def pipeline_batches(engine: Engine, limit: int = 30) -> list[Row]:
    """The latest micro-batches of every streaming query, newest first."""
    p = pipeline_progress
    stmt = (select(p.c.query, p.c.batch_id, p.c.recorded_at, p.c.input_rows, p.c.input_rows_per_s,
                   p.c.processed_rows_per_s, p.c.batch_duration_ms, p.c.watermark_ms, p.c.state_rows,
                   p.c.state_memory_bytes)
            .order_by(p.c.recorded_at.desc(), p.c.id.desc()).limit(limit))
    return fetch_rows(engine, stmt)


def pipeline_series(engine: Engine, window_ms: int = 30 * 60_000, limit: int = 2000) -> list[Row]:
    """Every streaming query's batches over the `window_ms` before the newest one, oldest first
    (at most the newest `limit`): what the pipeline charts draw.

    Read newest first by id (the table's only index), so the cost does not grow with its history.
    Keys: query, batch_id, recorded_at, input_rows_per_s, processed_rows_per_s, batch_duration_ms,
    watermark_ms.
    """
    p = pipeline_progress
    stmt = (select(p.c.query, p.c.batch_id, p.c.recorded_at, p.c.input_rows_per_s, p.c.processed_rows_per_s,
                   p.c.batch_duration_ms, p.c.watermark_ms).order_by(p.c.id.desc()).limit(limit))
    rows = fetch_rows(engine, stmt)
    if not rows:
        return []
    since = max(r["recorded_at"] for r in rows) - window_ms
    return sorted((r for r in rows if r["recorded_at"] >= since), key=lambda r: (r["recorded_at"], r["batch_id"]))


def quarantine_reasons(engine: Engine) -> list[Row]:
    """Quarantined messages by reason, its list indices left out (`reason_group`), most first. Keys:
    reason; messages, stored and counted alike; not_stored, those over
    `retention.quarantine_rows_per_reason` in their micro-batch, counted only; last_ms, when last seen."""
    q = quarantine
    stmt = select(q.c.reason, func.count().label("stored"), func.sum(q.c.not_stored).label("not_stored"),
                  func.max(q.c.recorded_at).label("last_ms")).group_by(q.c.reason)
    groups: dict[str, Row] = {}
    for r in fetch_rows(engine, stmt):
        group = reason_group(r["reason"])
        have = groups.setdefault(group, {"reason": group, "messages": 0, "not_stored": 0, "last_ms": r["last_ms"]})
        more = int(r["not_stored"] or 0)  # PostgreSQL sums a BIGINT as a NUMERIC
        have["messages"] += r["stored"] + more
        have["not_stored"] += more
        have["last_ms"] = max(have["last_ms"], r["last_ms"])
    return sorted(groups.values(), key=lambda g: (-g["messages"], g["reason"]))


def source_clock_rows(engine: Engine, limit: int = 20) -> list[Row]:
    """The collectors whose event times lead the job's clock the most (`source_clocks`: their latest
    micro-batch), each with its messages in quarantine for an event time ahead of the clock.
    Keys: source, lead_ms, events, ahead (both in that batch), updated_ms, quarantined."""
    s, q = source_clocks, quarantine
    rows = fetch_rows(engine, select(s.c.source, s.c.lead_ms, s.c.events, s.c.ahead, s.c.updated_ms)
                      .order_by(s.c.lead_ms.desc(), s.c.source).limit(limit))
    if not rows:
        return rows
    refused = {r["source"]: r["n"] for r in fetch_rows(engine, select(q.c.source, func.count().label("n"))
               .where(q.c.reason.in_(AHEAD_REASONS), q.c.source.in_([r["source"] for r in rows]))
               .group_by(q.c.source))}
    return [{**r, "quarantined": refused.get(r["source"], 0)} for r in rows]


def outbox_backlog(engine: Engine) -> Row:
    """Undelivered notifications: how many, how many have failed an attempt, the oldest."""
    o = outbox
    stmt = select(func.count().label("pending"),
                  func.coalesce(func.sum(case((o.c.last_error.is_not(None), 1), else_=0)), 0
                                ).label("failing"),
                  func.min(o.c.created_at).label("oldest_created_ms")
                  ).where(o.c.delivered_at.is_(None))
    return fetch_rows(engine, stmt)[0]
