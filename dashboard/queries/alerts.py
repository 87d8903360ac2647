"""The alerts' queries: lists by status and filters (the alerts page, a cluster's page), one alert,
the rules for the filter, and the silences in force."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, Select, String, cast, func, or_, select

from dashboard.queries.shared import Row, alerts_with_target, attributed_cluster, fetch_rows, severity_rank
from streaming.store import alerts, silences

__all__ = ["active_silences", "alert", "alert_list", "alert_rules", "cluster_alerts"]

# The name an alert is listed by: the one it fired with (issue 43), else its target, else its cluster id.
alert_name = func.coalesce(alerts.c.cluster_name, alerts.c.target, attributed_cluster)


def _alerts_stmt(status: str, limit: int) -> Select[Any]:
    # Firing: the worst first, a severity's alerts by cluster name (issue 43), the newest first.
    order = ([severity_rank(alerts.c.severity).desc(), func.lower(alert_name), alerts.c.starts_at.desc()]
             if status == "firing" else [alerts.c.ends_at.desc()])
    # cluster_id: the cluster the alert hurts (as on the overview); alert_cluster_id: its own field.
    return (select(alerts.c.alert_id, alerts.c.rule, alerts.c.severity, alerts.c.status,
                   attributed_cluster.label("cluster_id"), alerts.c.cluster_id.label("alert_cluster_id"),
                   alerts.c.target, alerts.c.broker_id,
                   alerts.c.endpoint, alerts.c.starts_at, alerts.c.ends_at, alerts.c.summary,
                   alerts.c.cluster_name, alerts.c.broker_host, alerts.c.rack)
            .select_from(alerts_with_target).where(alerts.c.status == status)
            .order_by(*order, alerts.c.alert_id).limit(limit))


def alert_list(engine: Engine, status: str, *, rules: Sequence[str] = (), severities: Sequence[str] = (),
               cluster: str = "", alert_id: str = "", limit: int = 200) -> list[Row]:
    """Firing (worst, newest first) or resolved (latest ended first) alerts, filtered.

    `cluster` matches a substring of the cluster's name, of its tags' keys or values, of the (attributed)
    cluster id or of the target name; `alert_id`, when given, keeps only that alert.
    """
    stmt = _alerts_stmt(status, limit)
    if alert_id.strip():
        stmt = stmt.where(alerts.c.alert_id == alert_id.strip())
    if rules:
        stmt = stmt.where(alerts.c.rule.in_(rules))
    if severities:
        stmt = stmt.where(alerts.c.severity.in_(severities))
    needle = cluster.strip().lower()
    if needle:
        stmt = stmt.where(or_(func.lower(attributed_cluster).contains(needle, autoescape=True),
                              func.lower(alerts.c.target).contains(needle, autoescape=True),
                              func.lower(alerts.c.cluster_name).contains(needle, autoescape=True),
                              func.lower(cast(alerts.c.tags, String)).contains(needle, autoescape=True)))
    return fetch_rows(engine, stmt)


def cluster_alerts(engine: Engine, cluster_id: str, status: str, limit: int = 50) -> list[Row]:
    """The cluster's alerts of one status, attributed as on the overview."""
    return fetch_rows(engine, _alerts_stmt(status, limit).where(attributed_cluster == cluster_id))


def alert_rules(engine: Engine) -> list[str]:
    """Rules that have ever alerted, for the filter."""
    with engine.connect() as conn:
        return list(conn.scalars(select(alerts.c.rule).distinct().order_by(alerts.c.rule)))


def alert(engine: Engine, alert_id: str) -> Row | None:
    """One alert's current row (the alert object's fields but details), or None."""
    stmt = select(alerts.c.alert_id, alerts.c.rule, alerts.c.severity, alerts.c.status, alerts.c.cluster_id,
                  alerts.c.target, alerts.c.broker_id, alerts.c.endpoint).where(alerts.c.alert_id == alert_id)
    rows = fetch_rows(engine, stmt)
    return rows[0] if rows else None


def active_silences(engine: Engine, now_ms: int) -> list[Row]:
    """Silences in force at `now_ms` (wall clock), ending last first."""
    s = silences
    stmt = (select(s).where(s.c.expired_at.is_(None), s.c.starts_at <= now_ms, s.c.ends_at > now_ms)
            .order_by(s.c.ends_at.desc()))
    return fetch_rows(engine, stmt)
