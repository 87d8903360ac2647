"""The store's numbers that `/metrics` (streaming/metrics/exposition.py) and the console's status
line (streaming/job/console.py) show: counts and latest rows, each reading a few grouped statements on
one connection. They name and label nothing: their readers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, Row, case, func, select

from streaming.records.contract import AHEAD_REASONS
from streaming.store.database import Store
from streaming.store.delivery_states import DEAD, DELIVERED, PENDING
from streaming.store.job_tables import (
    alerts,
    brokers,
    clusters,
    job_restarts,
    outbox,
    pipeline_progress,
    quarantine,
    source_clocks,
    targets,
)
from streaming.store.notifier_tables import deliveries

__all__ = ["FleetRows", "StatusCounts", "firing_broker_details", "fleet_rows", "source_clock_rows", "status_counts"]


@dataclass(frozen=True)
class StatusCounts:
    firing: int  # alerts firing
    alerts: int  # alerts firing or resolved, since the store was created
    delivered: int  # deliveries delivered
    failing: int  # deliveries dead, or pending after a failed attempt


def status_counts(store: Store) -> StatusCounts:
    """The console's status line: alerts by status, deliveries delivered and failing."""
    with store.engine.connect() as conn:
        by_status = {status: n for status, n in conn.execute(
            select(alerts.c.status, func.count()).group_by(alerts.c.status))}
        by_state = {state: n for state, n in conn.execute(
            select(deliveries.c.state, func.count()).group_by(deliveries.c.state))}
        retrying = conn.scalar(select(func.count()).select_from(deliveries).where(
            deliveries.c.state == PENDING, deliveries.c.attempts > 0)) or 0
    return StatusCounts(by_status.get("firing", 0), sum(by_status.values()), by_state.get(DELIVERED, 0),
                        by_state.get(DEAD, 0) + retrying)


@dataclass(frozen=True)
class FleetRows:
    """The fleet, the job and the outbox as /metrics counts them, read on one connection."""

    brokers: list[Row[Any]]  # (cluster_id, target, state or "UNKNOWN", count), by cluster id
    # (cluster_id, target, rule, severity, count) of the firing alerts: a target rule's alert is
    # attributed to its target's pinned (else last seen) cluster id, as on the dashboard.
    firing: list[Row[Any]]
    clusters: list[Row[Any]]  # (cluster_id, target, controller_id, last_response_ms), by cluster id
    progress: list[Row[Any]]  # the latest pipeline_progress row of each streaming query, by query
    restarts: list[Row[Any]]  # job_restarts' rows
    quarantine: list[Row[Any]]  # (reason, rows, the sum of not_stored)
    quarantine_last_id: int  # 0 when none was ever stored
    outbox: Row[Any]  # (undelivered, of them with a last error, the oldest one's created_at)


def fleet_rows(engine: Engine) -> FleetRows:
    """Brokers by state, firing alerts, clusters, the job's progress and restarts, quarantine and the
    outbox's backlog, for one scrape."""
    state = func.coalesce(brokers.c.state, "UNKNOWN")
    attributed = func.coalesce(alerts.c.cluster_id, targets.c.pinned_cluster_id, targets.c.last_cluster_id)
    alert_target = func.coalesce(alerts.c.target, clusters.c.target)
    latest = (select(pipeline_progress.c.query, func.max(pipeline_progress.c.id).label("id"))
              .group_by(pipeline_progress.c.query).subquery())
    p = pipeline_progress
    with engine.connect() as conn:
        return FleetRows(
            brokers=list(conn.execute(
                select(brokers.c.cluster_id, clusters.c.target, state, func.count())
                .select_from(brokers.outerjoin(clusters, clusters.c.cluster_id == brokers.c.cluster_id))
                .group_by(brokers.c.cluster_id, clusters.c.target, state)
                .order_by(brokers.c.cluster_id))),
            firing=list(conn.execute(
                select(attributed, alert_target, alerts.c.rule, alerts.c.severity, func.count())
                .select_from(alerts.outerjoin(targets, targets.c.target == alerts.c.target)
                             .outerjoin(clusters, clusters.c.cluster_id == alerts.c.cluster_id))
                .where(alerts.c.status == "firing")
                .group_by(attributed, alert_target, alerts.c.rule, alerts.c.severity)
                .order_by(attributed, alerts.c.rule))),
            clusters=list(conn.execute(
                select(clusters.c.cluster_id, clusters.c.target, clusters.c.controller_id,
                       clusters.c.last_response_ms).order_by(clusters.c.cluster_id))),
            progress=list(conn.execute(select(p).join(latest, latest.c.id == p.c.id).order_by(p.c.query))),
            restarts=list(conn.execute(select(job_restarts))),
            quarantine=list(conn.execute(
                select(quarantine.c.reason, func.count(), func.sum(quarantine.c.not_stored))
                .group_by(quarantine.c.reason))),
            quarantine_last_id=conn.scalar(select(func.coalesce(func.max(quarantine.c.id), 0))),
            outbox=conn.execute(
                select(func.count(),
                       func.coalesce(func.sum(case((outbox.c.last_error.is_not(None), 1), else_=0)), 0),
                       func.min(outbox.c.created_at))
                .where(outbox.c.delivered_at.is_(None))).one())


def source_clock_rows(engine: Engine, heard_since_ms: int, limit: int) -> tuple[list[Row[Any]], list[Row[Any]]]:
    """(source, lead_ms) of the `limit` sources heard of since `heard_since_ms` whose clocks lead
    most, and (source, messages) of the `limit` sources with most messages in quarantine for an
    event time ahead of the job's clock."""
    s, q = source_clocks, quarantine
    refused = func.count().label("n")
    with engine.connect() as conn:
        leads = list(conn.execute(
            select(s.c.source, s.c.lead_ms).where(s.c.updated_ms >= heard_since_ms)
            .order_by(s.c.lead_ms.desc(), s.c.source).limit(limit)))
        ahead = list(conn.execute(
            select(q.c.source, refused).where(q.c.reason.in_(AHEAD_REASONS), q.c.source.is_not(None))
            .group_by(q.c.source).order_by(refused.desc(), q.c.source).limit(limit)))
    return leads, ahead


def firing_broker_details(engine: Engine, limit: int) -> list[Row[Any]]:
    """(cluster_id, broker_id, rule, details) of the `limit` firing broker alerts that started last."""
    a = alerts
    with engine.connect() as conn:
        return list(conn.execute(
            select(a.c.cluster_id, a.c.broker_id, a.c.rule, a.c.details)
            .where(a.c.status == "firing", a.c.broker_id.is_not(None))
            .order_by(a.c.starts_at.desc()).limit(limit)))
