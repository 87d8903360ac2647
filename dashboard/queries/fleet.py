"""The fleet overview's queries: summary counts, one row per cluster, each cluster's worst alert."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, case, func, or_, select, union

from dashboard.queries.shared import (
    STATES,
    Row,
    alerts_with_target,
    attributed_cluster,
    fetch_rows,
    fleet_clock,
    severity_of_rank,
    severity_rank,
)
from streaming.store import alerts, brokers, clusters, targets

__all__ = ["fleet_overview", "fleet_summary", "tagged_targets", "worst_alerts"]


def _cluster_ids() -> Select[Any]:
    """Every cluster the store knows of, from any table that names one."""
    firing = select(attributed_cluster.label("cluster_id")).select_from(alerts_with_target).where(
        alerts.c.status == "firing", attributed_cluster.is_not(None))
    return union(select(clusters.c.cluster_id), select(brokers.c.cluster_id), firing)


def tagged_targets(tags: Mapping[str, Mapping[str, str]],
                   selected: Mapping[str, Collection[str]]) -> set[str] | None:
    """Target names whose tags match every selected key (any of its selected values).

    `tags` maps a target name to its tags (from the config). None when nothing is selected:
    no filter, which is not the same as a filter that matches no target.
    """
    active = {key: set(values) for key, values in selected.items() if values}
    if not active:
        return None
    return {name for name, own in tags.items() if all(own.get(k) in vals for k, vals in active.items())}


def _of_targets(cluster_id: ColumnElement[Any], names: Collection[str]) -> ColumnElement[bool]:
    """The cluster belongs to one of the named targets: by its own row, or as their pinned or
    last seen id (a cluster heard of only through an alert has no row of its own)."""
    names = sorted(names)
    return or_(cluster_id.in_(select(clusters.c.cluster_id).where(clusters.c.target.in_(names))),
               cluster_id.in_(select(targets.c.pinned_cluster_id).where(targets.c.target.in_(names))),
               cluster_id.in_(select(targets.c.last_cluster_id).where(targets.c.target.in_(names))))


def fleet_summary(engine: Engine, targets_in: Collection[str] | None = None) -> Row:
    """Fleet-wide counts: clusters, brokers by state, firing alerts by severity.

    `targets_in` (target names, e.g. from a tag filter) limits the counts to their clusters.
    """
    ids = _cluster_ids().subquery()
    n_stmt = select(func.count()).select_from(ids)
    state = func.coalesce(brokers.c.state, "UNKNOWN")
    state_stmt = select(state, func.count()).group_by(state)
    severity_stmt = (select(alerts.c.severity, func.count()).select_from(alerts_with_target)
                     .where(alerts.c.status == "firing").group_by(alerts.c.severity))
    if targets_in is not None:
        n_stmt = n_stmt.where(_of_targets(ids.c.cluster_id, targets_in))
        state_stmt = state_stmt.where(_of_targets(brokers.c.cluster_id, targets_in))
        severity_stmt = severity_stmt.where(_of_targets(attributed_cluster, targets_in))
    with engine.connect() as conn:
        n_clusters = conn.scalar(n_stmt) or 0
        by_state = dict(conn.execute(state_stmt).all())
        by_severity = dict(conn.execute(severity_stmt).all())
    return {"clusters": n_clusters, "brokers": by_state, "firing": by_severity}


def fleet_overview(engine: Engine, search: str = "", targets_in: Collection[str] | None = None,
                   also: tuple[Collection[str], Collection[str]] = ((), ())) -> list[Row]:
    """One row per cluster, worst first; `search` matches the cluster id or target name, and `also`
    (cluster ids, target names) lists what else it matched (a configured name, a tag: the page knows
    them); `targets_in` (target names, e.g. from a tag filter) keeps only their clusters.

    Keys: cluster_id, target, brokers, online, fenced, stopping, offline, unknown, firing,
    severity (worst firing, None when healthy), stalest_heartbeat_age_ms.
    """
    ids = _cluster_ids().subquery("ids")
    per_state = [func.sum(case((brokers.c.state == s, 1), else_=0)).label(s.lower()) for s in STATES]
    b = (select(brokers.c.cluster_id, func.count().label("brokers"), *per_state,
                func.sum(case((brokers.c.state.is_(None), 1), else_=0)).label("unknown"),
                func.min(brokers.c.last_heartbeat_ms).label("oldest_heartbeat_ms"))
         .group_by(brokers.c.cluster_id).subquery("b"))
    a = (select(attributed_cluster.label("cluster_id"), func.count().label("firing"),
                func.max(severity_rank(alerts.c.severity)).label("worst"))
         .select_from(alerts_with_target).where(alerts.c.status == "firing")
         .group_by(attributed_cluster).subquery("a"))
    worst = func.coalesce(a.c.worst, 0)
    firing = func.coalesce(a.c.firing, 0)
    stmt = (
        select(ids.c.cluster_id, clusters.c.target,
               *[func.coalesce(b.c[name], 0).label(name)
                 for name in ("brokers", *(s.lower() for s in STATES), "unknown")],
               firing.label("firing"), worst.label("worst"),
               (fleet_clock() - b.c.oldest_heartbeat_ms).label("stalest_heartbeat_age_ms"))
        .select_from(ids.outerjoin(clusters, clusters.c.cluster_id == ids.c.cluster_id)
                     .outerjoin(b, b.c.cluster_id == ids.c.cluster_id)
                     .outerjoin(a, a.c.cluster_id == ids.c.cluster_id))
        .order_by(worst.desc(), firing.desc(), ids.c.cluster_id)
    )
    needle = search.strip().lower()
    if needle:
        stmt = stmt.where(or_(func.lower(ids.c.cluster_id).contains(needle, autoescape=True),
                              func.lower(clusters.c.target).contains(needle, autoescape=True),
                              ids.c.cluster_id.in_(sorted(also[0])), clusters.c.target.in_(sorted(also[1]))))
    if targets_in is not None:
        stmt = stmt.where(_of_targets(ids.c.cluster_id, targets_in))
    rows = fetch_rows(engine, stmt)
    for row in rows:
        row["severity"] = severity_of_rank(row.pop("worst"))
    return rows


def worst_alerts(engine: Engine) -> dict[str, Row]:
    """Each cluster's worst firing alert (as attributed on the overview): the most severe, then the
    newest. Keys: cluster_id, rule, severity, summary."""
    order = (severity_rank(alerts.c.severity).desc(), alerts.c.starts_at.desc(), alerts.c.alert_id)
    ranked = (select(attributed_cluster.label("cluster_id"), alerts.c.rule, alerts.c.severity, alerts.c.summary,
                     func.row_number().over(partition_by=attributed_cluster, order_by=order).label("n"))
              .select_from(alerts_with_target)
              .where(alerts.c.status == "firing", attributed_cluster.is_not(None)).subquery())
    stmt = select(ranked.c.cluster_id, ranked.c.rule, ranked.c.severity, ranked.c.summary).where(ranked.c.n == 1)
    return {row["cluster_id"]: row for row in fetch_rows(engine, stmt)}
