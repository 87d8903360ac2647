"""The identity & routing page's queries: the cluster-id registry and the endpoint alerts
(misroutes, collisions) with their details."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import Engine, Select, and_, case, or_, select

from dashboard.queries.shared import Row, fetch_rows, fleet_clock
from streaming.store import alerts, targets

__all__ = ["endpoint_alerts", "target_registry"]


def target_registry(engine: Engine, configured: Collection[str] = ()) -> list[Row]:
    """The cluster-id registry: every target with its pinned and last seen cluster id.

    Targets whose last seen id differs from the pinned one come first, then failing targets
    (last error newer than the last good answer), then the rest by name. `configured` target
    names that the store has never heard of are listed as unseen. Keys: target,
    pinned_cluster_id, last_cluster_id, last_ok_age_ms, last_error, last_error_age_ms, differs,
    failing, seen.
    """
    t = targets
    differs = and_(t.c.pinned_cluster_id.is_not(None), t.c.last_cluster_id.is_not(None),
                   t.c.pinned_cluster_id != t.c.last_cluster_id)
    failing = and_(t.c.last_error_ms.is_not(None),
                   or_(t.c.last_ok_ms.is_(None), t.c.last_error_ms > t.c.last_ok_ms))
    differs_flag = case((differs, 1), else_=0)
    failing_flag = case((failing, 1), else_=0)
    clock = fleet_clock()
    stmt = (select(t.c.target, t.c.pinned_cluster_id, t.c.last_cluster_id,
                   (clock - t.c.last_ok_ms).label("last_ok_age_ms"), t.c.last_error,
                   (clock - t.c.last_error_ms).label("last_error_age_ms"),
                   differs_flag.label("differs"), failing_flag.label("failing"))
            .order_by(differs_flag.desc(), failing_flag.desc(), t.c.target))
    rows = fetch_rows(engine, stmt)
    seen = set()
    for row in rows:
        row["differs"], row["failing"], row["seen"] = bool(row["differs"]), bool(row["failing"]), True
        seen.add(row["target"])
    rows += [{"target": name, "pinned_cluster_id": None, "last_cluster_id": None, "last_ok_age_ms": None,
              "last_error": None, "last_error_age_ms": None, "differs": False, "failing": False,
              "seen": False} for name in sorted(set(configured) - seen)]
    return rows


def endpoint_alerts(engine: Engine, rule: str, *, firing_limit: int = 200, resolved_limit: int = 20) -> list[Row]:
    """One endpoint rule's alerts (connection.misrouted, endpoint.collision) with their details:
    the firing ones (newest first), then the latest resolved ones."""
    def stmt(status: str, limit: int) -> Select[Any]:
        order = alerts.c.starts_at.desc() if status == "firing" else alerts.c.ends_at.desc()
        return (select(alerts.c.alert_id, alerts.c.status, alerts.c.severity, alerts.c.cluster_id,
                       alerts.c.target, alerts.c.endpoint, alerts.c.starts_at, alerts.c.ends_at,
                       alerts.c.summary, alerts.c.details)
                .where(alerts.c.rule == rule, alerts.c.status == status)
                .order_by(order, alerts.c.alert_id).limit(limit))

    return (fetch_rows(engine, stmt("firing", firing_limit))
            + fetch_rows(engine, stmt("resolved", resolved_limit)))
