"""The cluster page's queries: the cluster's row, its brokers, controller history and broker
state timeline (its alerts: `queries.alerts.cluster_alerts`)."""

from __future__ import annotations

import pandas as pd
from sqlalchemy import Engine, func, select

from dashboard.queries.shared import Row, fetch_rows, fleet_clock
from streaming.store import alerts, broker_transitions, brokers, clusters, controller_history

__all__ = ["blast_radius", "broker_timeline", "cluster_brokers", "cluster_info", "controller_changes"]


def cluster_info(engine: Engine, cluster_id: str) -> Row | None:
    """The cluster's row (target, controller_id, last response age), or None if unknown."""
    stmt = select(clusters.c.cluster_id, clusters.c.target, clusters.c.controller_id,
                  (fleet_clock() - clusters.c.last_response_ms).label("last_response_age_ms")
                  ).where(clusters.c.cluster_id == cluster_id)
    rows = fetch_rows(engine, stmt)
    return rows[0] if rows else None


def cluster_brokers(engine: Engine, cluster_id: str) -> list[Row]:
    """The cluster's brokers by id, with heartbeat and answer ages against the fleet clock."""
    clock = fleet_clock()
    stmt = (select(brokers.c.broker_id, brokers.c.state, brokers.c.fenced, brokers.c.broker_epoch,
                   (clock - brokers.c.last_heartbeat_ms).label("heartbeat_age_ms"),
                   (clock - brokers.c.last_answer_ms).label("answer_age_ms"),
                   brokers.c.endpoints, brokers.c.rack)
            .where(brokers.c.cluster_id == cluster_id).order_by(brokers.c.broker_id))
    return fetch_rows(engine, stmt)


def controller_changes(engine: Engine, cluster_id: str, limit: int = 20) -> list[Row]:
    """The cluster's latest controller changes, newest first, each with how long it held.

    Keys: ts, controller_id (None: no active controller), held_ms (until the next change; for
    the current controller, until the fleet clock), current.
    """
    h = controller_history
    stmt = (select(h.c.ts, h.c.controller_id).where(h.c.cluster_id == cluster_id)
            .order_by(h.c.ts.desc()).limit(limit))
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(stmt)]
        clock = conn.scalar(select(func.max(brokers.c.updated_ms)))
    until = clock
    for i, row in enumerate(rows):
        row["current"] = i == 0
        row["held_ms"] = None if until is None else max(until - row["ts"], 0)
        until = row["ts"]
    return rows


def broker_timeline(engine: Engine, cluster_id: str, limit: int = 500) -> pd.DataFrame:
    """State segments of the cluster's brokers from their latest `limit` transitions.

    Columns: broker_id, state, reason, start_ms, end_ms. A segment ends at the broker's next
    transition; the current one ends at the fleet clock.
    """
    t = broker_transitions
    nxt = func.lead(t.c.ts).over(partition_by=t.c.broker_id, order_by=t.c.ts)
    segments = (select(t.c.broker_id, t.c.state, t.c.reason, t.c.ts.label("start_ms"),
                       nxt.label("end_ms"))
                .where(t.c.cluster_id == cluster_id).subquery())
    stmt = select(segments, fleet_clock().label("clock")).order_by(segments.c.start_ms.desc()).limit(limit)
    frame = pd.DataFrame(fetch_rows(engine, stmt),
                         columns=["broker_id", "state", "reason", "start_ms", "end_ms", "clock"])
    # A transition newer than every broker update still gets a visible (zero-length) segment.
    frame["end_ms"] = frame["end_ms"].fillna(frame["clock"]).fillna(frame["start_ms"])
    frame["end_ms"] = frame[["start_ms", "end_ms"]].max(axis=1)
    return frame.drop(columns="clock").sort_values(["broker_id", "start_ms"], ignore_index=True)


def blast_radius(engine: Engine, cluster_id: str, limit: int = 50) -> list[Row]:
    """The cluster's firing broker incidents that carry a blast radius (issue 30, `details.impact`),
    newest first. Keys: broker_id, rule, severity, starts_at, impact."""
    stmt = (select(alerts.c.broker_id, alerts.c.rule, alerts.c.severity, alerts.c.starts_at, alerts.c.details)
            .where(alerts.c.cluster_id == cluster_id, alerts.c.status == "firing", alerts.c.broker_id.is_not(None))
            .order_by(alerts.c.starts_at.desc(), alerts.c.rule).limit(limit))
    rows = []
    for row in fetch_rows(engine, stmt):
        details = row.pop("details")
        impact = details.get("impact") if isinstance(details, dict) else None
        if isinstance(impact, dict):
            rows.append({**row, "impact": impact})
    return rows
