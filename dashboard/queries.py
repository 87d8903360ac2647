"""Read-only queries behind the dashboard pages.

Every page costs a handful of statements whatever the fleet size: counts, worst severities and
ages are aggregated by the database (1,000 clusters x 12 brokers is ~12k broker rows), and
lists are capped. Ages are measured against the fleet clock (the newest `brokers.updated_ms`),
not the wall clock, so a store filled by a replay of last week's file still reads sensibly.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pandas as pd
from sqlalchemy import (
    ColumnElement,
    Engine,
    MetaData,
    Select,
    Table,
    and_,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    union,
)

from streaming.alert import SEVERITIES
from streaming.store import (
    alerts,
    broker_transitions,
    brokers,
    clusters,
    controller_history,
    outbox,
    pipeline_progress,
    quarantine,
    silences,
    targets,
)

__all__ = [
    "SEVERITIES",
    "STATES",
    "active_silences",
    "alert",
    "alert_list",
    "alert_rules",
    "broker_timeline",
    "cluster_alerts",
    "cluster_brokers",
    "cluster_info",
    "controller_changes",
    "delivery_counts",
    "delivery_list",
    "delivery_receivers",
    "endpoint_alerts",
    "fleet_clock_ms",
    "fleet_overview",
    "fleet_summary",
    "outbox_backlog",
    "pipeline_batches",
    "pipeline_series",
    "quarantine_reasons",
    "tagged_targets",
    "target_registry",
    "worst_alerts",
]

Row = dict[str, Any]

# The rank orders clusters and alerts by severity.
_RANK = {"critical": 3, "warning": 2, "info": 1}
STATES = ("ONLINE", "FENCED", "STOPPING", "OFFLINE")


def _rank(severity: ColumnElement[Any]) -> ColumnElement[int]:
    return case(_RANK, value=severity, else_=0)


def _severity_of(rank: int | None) -> str | None:
    return next((name for name, r in _RANK.items() if r == rank), None)


# Target alerts (cluster.unreachable, cluster.id_invalid...) may carry no cluster id: they are
# attributed through the target's pinned or last seen id, so the cluster they hurt turns red.
_alerts_with_target = alerts.outerjoin(targets, targets.c.target == alerts.c.target)
_attributed_cluster = func.coalesce(alerts.c.cluster_id, targets.c.pinned_cluster_id,
                                   targets.c.last_cluster_id)


def _clock() -> ColumnElement[int]:
    return select(func.max(brokers.c.updated_ms)).scalar_subquery()


def _rows(engine: Engine, stmt: Select[Any]) -> list[Row]:
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(stmt)]


def fleet_clock_ms(engine: Engine) -> int | None:
    """The fleet clock: the newest broker update, or None for an empty store."""
    with engine.connect() as conn:
        return conn.scalar(select(func.max(brokers.c.updated_ms)))


def _cluster_ids() -> Select[Any]:
    """Every cluster the store knows of, from any table that names one."""
    firing = select(_attributed_cluster.label("cluster_id")).select_from(_alerts_with_target).where(
        alerts.c.status == "firing", _attributed_cluster.is_not(None))
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
    severity_stmt = (select(alerts.c.severity, func.count()).select_from(_alerts_with_target)
                     .where(alerts.c.status == "firing").group_by(alerts.c.severity))
    if targets_in is not None:
        n_stmt = n_stmt.where(_of_targets(ids.c.cluster_id, targets_in))
        state_stmt = state_stmt.where(_of_targets(brokers.c.cluster_id, targets_in))
        severity_stmt = severity_stmt.where(_of_targets(_attributed_cluster, targets_in))
    with engine.connect() as conn:
        n_clusters = conn.scalar(n_stmt) or 0
        by_state = dict(conn.execute(state_stmt).all())
        by_severity = dict(conn.execute(severity_stmt).all())
    return {"clusters": n_clusters, "brokers": by_state, "firing": by_severity}


def fleet_overview(engine: Engine, search: str = "", targets_in: Collection[str] | None = None) -> list[Row]:
    """One row per cluster, worst first; `search` matches the cluster id or target name,
    `targets_in` (target names, e.g. from a tag filter) keeps only their clusters.

    Keys: cluster_id, target, brokers, online, fenced, stopping, offline, unknown, firing,
    severity (worst firing, None when healthy), stalest_heartbeat_age_ms.
    """
    ids = _cluster_ids().subquery("ids")
    per_state = [func.sum(case((brokers.c.state == s, 1), else_=0)).label(s.lower()) for s in STATES]
    b = (select(brokers.c.cluster_id, func.count().label("brokers"), *per_state,
                func.sum(case((brokers.c.state.is_(None), 1), else_=0)).label("unknown"),
                func.min(brokers.c.last_heartbeat_ms).label("oldest_heartbeat_ms"))
         .group_by(brokers.c.cluster_id).subquery("b"))
    a = (select(_attributed_cluster.label("cluster_id"), func.count().label("firing"),
                func.max(_rank(alerts.c.severity)).label("worst"))
         .select_from(_alerts_with_target).where(alerts.c.status == "firing")
         .group_by(_attributed_cluster).subquery("a"))
    worst = func.coalesce(a.c.worst, 0)
    firing = func.coalesce(a.c.firing, 0)
    stmt = (
        select(ids.c.cluster_id, clusters.c.target,
               *[func.coalesce(b.c[name], 0).label(name)
                 for name in ("brokers", *(s.lower() for s in STATES), "unknown")],
               firing.label("firing"), worst.label("worst"),
               (_clock() - b.c.oldest_heartbeat_ms).label("stalest_heartbeat_age_ms"))
        .select_from(ids.outerjoin(clusters, clusters.c.cluster_id == ids.c.cluster_id)
                     .outerjoin(b, b.c.cluster_id == ids.c.cluster_id)
                     .outerjoin(a, a.c.cluster_id == ids.c.cluster_id))
        .order_by(worst.desc(), firing.desc(), ids.c.cluster_id)
    )
    needle = search.strip().lower()
    if needle:
        stmt = stmt.where(or_(func.lower(ids.c.cluster_id).contains(needle, autoescape=True),
                              func.lower(clusters.c.target).contains(needle, autoescape=True)))
    if targets_in is not None:
        stmt = stmt.where(_of_targets(ids.c.cluster_id, targets_in))
    rows = _rows(engine, stmt)
    for row in rows:
        row["severity"] = _severity_of(row.pop("worst"))
    return rows


def worst_alerts(engine: Engine) -> dict[str, Row]:
    """Each cluster's worst firing alert (as attributed on the overview): the most severe, then the
    newest. Keys: cluster_id, rule, severity, summary."""
    order = (_rank(alerts.c.severity).desc(), alerts.c.starts_at.desc(), alerts.c.alert_id)
    ranked = (select(_attributed_cluster.label("cluster_id"), alerts.c.rule, alerts.c.severity, alerts.c.summary,
                     func.row_number().over(partition_by=_attributed_cluster, order_by=order).label("n"))
              .select_from(_alerts_with_target)
              .where(alerts.c.status == "firing", _attributed_cluster.is_not(None)).subquery())
    stmt = select(ranked.c.cluster_id, ranked.c.rule, ranked.c.severity, ranked.c.summary).where(ranked.c.n == 1)
    return {row["cluster_id"]: row for row in _rows(engine, stmt)}


def cluster_info(engine: Engine, cluster_id: str) -> Row | None:
    """The cluster's row (target, controller_id, last response age), or None if unknown."""
    stmt = select(clusters.c.cluster_id, clusters.c.target, clusters.c.controller_id,
                  (_clock() - clusters.c.last_response_ms).label("last_response_age_ms")
                  ).where(clusters.c.cluster_id == cluster_id)
    rows = _rows(engine, stmt)
    return rows[0] if rows else None


def cluster_brokers(engine: Engine, cluster_id: str) -> list[Row]:
    """The cluster's brokers by id, with heartbeat and answer ages against the fleet clock."""
    clock = _clock()
    stmt = (select(brokers.c.broker_id, brokers.c.state, brokers.c.fenced, brokers.c.broker_epoch,
                   (clock - brokers.c.last_heartbeat_ms).label("heartbeat_age_ms"),
                   (clock - brokers.c.last_answer_ms).label("answer_age_ms"),
                   brokers.c.endpoints, brokers.c.rack)
            .where(brokers.c.cluster_id == cluster_id).order_by(brokers.c.broker_id))
    return _rows(engine, stmt)


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


def _alerts_stmt(status: str, limit: int) -> Select[Any]:
    order = ([_rank(alerts.c.severity).desc(), alerts.c.starts_at.desc()] if status == "firing"
             else [alerts.c.ends_at.desc()])
    # cluster_id: the cluster the alert hurts (as on the overview); alert_cluster_id: its own field.
    return (select(alerts.c.alert_id, alerts.c.rule, alerts.c.severity, alerts.c.status,
                   _attributed_cluster.label("cluster_id"), alerts.c.cluster_id.label("alert_cluster_id"),
                   alerts.c.target, alerts.c.broker_id,
                   alerts.c.endpoint, alerts.c.starts_at, alerts.c.ends_at, alerts.c.summary)
            .select_from(_alerts_with_target).where(alerts.c.status == status)
            .order_by(*order, alerts.c.alert_id).limit(limit))


def alert_list(engine: Engine, status: str, *, rules: Sequence[str] = (), severities: Sequence[str] = (),
               cluster: str = "", alert_id: str = "", limit: int = 200) -> list[Row]:
    """Firing (worst, newest first) or resolved (latest ended first) alerts, filtered.

    `cluster` matches a substring of the (attributed) cluster id or of the target name;
    `alert_id`, when given, keeps only that alert.
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
        stmt = stmt.where(or_(func.lower(_attributed_cluster).contains(needle, autoescape=True),
                              func.lower(alerts.c.target).contains(needle, autoescape=True)))
    return _rows(engine, stmt)


def cluster_alerts(engine: Engine, cluster_id: str, status: str, limit: int = 50) -> list[Row]:
    """The cluster's alerts of one status, attributed as on the overview."""
    return _rows(engine, _alerts_stmt(status, limit).where(_attributed_cluster == cluster_id))


def alert_rules(engine: Engine) -> list[str]:
    """Rules that have ever alerted, for the filter."""
    with engine.connect() as conn:
        return list(conn.scalars(select(alerts.c.rule).distinct().order_by(alerts.c.rule)))


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
    stmt = select(segments, _clock().label("clock")).order_by(segments.c.start_ms.desc()).limit(limit)
    frame = pd.DataFrame(_rows(engine, stmt),
                         columns=["broker_id", "state", "reason", "start_ms", "end_ms", "clock"])
    # A transition newer than every broker update still gets a visible (zero-length) segment.
    frame["end_ms"] = frame["end_ms"].fillna(frame["clock"]).fillna(frame["start_ms"])
    frame["end_ms"] = frame[["start_ms", "end_ms"]].max(axis=1)
    return frame.drop(columns="clock").sort_values(["broker_id", "start_ms"], ignore_index=True)


def pipeline_batches(engine: Engine, limit: int = 30) -> list[Row]:
    """The latest micro-batches of every streaming query, newest first."""
    p = pipeline_progress
    stmt = (select(p.c.query, p.c.batch_id, p.c.recorded_at, p.c.input_rows, p.c.input_rows_per_s,
                   p.c.processed_rows_per_s, p.c.batch_duration_ms, p.c.watermark_ms, p.c.state_rows,
                   p.c.state_memory_bytes)
            .order_by(p.c.recorded_at.desc(), p.c.id.desc()).limit(limit))
    return _rows(engine, stmt)


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
    rows = _rows(engine, stmt)
    if not rows:
        return []
    since = max(r["recorded_at"] for r in rows) - window_ms
    return sorted((r for r in rows if r["recorded_at"] >= since), key=lambda r: (r["recorded_at"], r["batch_id"]))


def quarantine_reasons(engine: Engine) -> list[Row]:
    """Quarantined messages by reason (most first), with when each was last seen."""
    q = quarantine
    n = func.count().label("messages")
    stmt = (select(q.c.reason, n, func.max(q.c.recorded_at).label("last_ms"))
            .group_by(q.c.reason).order_by(n.desc(), q.c.reason))
    return _rows(engine, stmt)


def outbox_backlog(engine: Engine) -> Row:
    """Undelivered notifications: how many, how many have failed an attempt, the oldest."""
    o = outbox
    stmt = select(func.count().label("pending"),
                  func.coalesce(func.sum(case((o.c.last_error.is_not(None), 1), else_=0)), 0
                                ).label("failing"),
                  func.min(o.c.created_at).label("oldest_created_ms")
                  ).where(o.c.delivered_at.is_(None))
    return _rows(engine, stmt)[0]


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
    clock = _clock()
    stmt = (select(t.c.target, t.c.pinned_cluster_id, t.c.last_cluster_id,
                   (clock - t.c.last_ok_ms).label("last_ok_age_ms"), t.c.last_error,
                   (clock - t.c.last_error_ms).label("last_error_age_ms"),
                   differs_flag.label("differs"), failing_flag.label("failing"))
            .order_by(differs_flag.desc(), failing_flag.desc(), t.c.target))
    rows = _rows(engine, stmt)
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

    return _rows(engine, stmt("firing", firing_limit)) + _rows(engine, stmt("resolved", resolved_limit))


def alert(engine: Engine, alert_id: str) -> Row | None:
    """One alert's current row (the alert object's fields but details), or None."""
    stmt = select(alerts.c.alert_id, alerts.c.rule, alerts.c.severity, alerts.c.status, alerts.c.cluster_id,
                  alerts.c.target, alerts.c.broker_id, alerts.c.endpoint).where(alerts.c.alert_id == alert_id)
    rows = _rows(engine, stmt)
    return rows[0] if rows else None


def active_silences(engine: Engine, now_ms: int) -> list[Row]:
    """Silences in force at `now_ms` (wall clock), ending last first."""
    s = silences
    stmt = (select(s).where(s.c.expired_at.is_(None), s.c.starts_at <= now_ms, s.c.ends_at > now_ms)
            .order_by(s.c.ends_at.desc()))
    return _rows(engine, stmt)


# The columns of `deliveries` the deliveries page shows or derives from. The notifier owns the
# table and may add or drop columns: they are read by name from the table as the database has
# it, and a missing one reads as None.
DELIVERY_COLUMNS = ("id", "outbox_id", "receiver", "alert_id", "status", "rule", "subject", "state", "attempts",
                    "next_attempt_at", "last_attempt_at", "last_error", "dead_letter", "silence_id", "created_at",
                    "delivered_at")


@functools.lru_cache(maxsize=16)
def _reflected(engine: Engine, name: str) -> Table:
    """A table as the database has it (its columns read once per engine)."""
    return Table(name, MetaData(), autoload_with=engine)


def _delivery_state(d: Table) -> ColumnElement[Any]:
    """pending, delivered, dead or silenced: the state column, or what the other columns tell."""
    if "state" in d.c:
        return d.c.state
    whens = ([(d.c.dead_letter.is_(True), "dead")] if "dead_letter" in d.c else []) + (
        [(d.c.delivered_at.is_not(None), "delivered")] if "delivered_at" in d.c else [])
    return case(*whens, else_="pending") if whens else literal("pending")


def _last_activity(d: Table) -> list[ColumnElement[Any]]:
    present = [d.c[n] for n in ("delivered_at", "last_attempt_at", "created_at") if n in d.c]
    return [func.coalesce(*present) if len(present) > 1 else present[0]] if present else []


def delivery_list(engine: Engine, *, receivers: Sequence[str] = (), states: Sequence[str] = (),
                  limit: int = 200) -> list[Row]:
    """The latest deliveries (latest activity first), filtered by receiver and state, with
    their alert's severity and summary. Keys: DELIVERY_COLUMNS, severity, summary."""
    d = _reflected(engine, "deliveries")
    activity = _last_activity(d)
    state = _delivery_state(d)
    stmt = (select(*(d.c[n] for n in DELIVERY_COLUMNS if n in d.c and n != "state"), state.label("state"),
                   alerts.c.severity, alerts.c.summary)
            .select_from(d.outerjoin(alerts, alerts.c.alert_id == d.c.alert_id))
            .order_by(*(a.desc() for a in activity), *([d.c.id.desc()] if "id" in d.c else [])).limit(limit))
    if receivers:
        stmt = stmt.where(d.c.receiver.in_(receivers))
    if states:
        stmt = stmt.where(state.in_(states))
    rows = _rows(engine, stmt)
    for row in rows:
        for name in DELIVERY_COLUMNS:
            row.setdefault(name, None)
    return rows


def delivery_counts(engine: Engine) -> Row:
    """Deliveries by state (delivered, retrying: pending after a failed attempt, queued: pending
    and not tried yet, dead, silenced) and `unplanned`: undelivered outbox rows the notifier has
    not picked up yet (no delivery row)."""
    d = _reflected(engine, "deliveries")
    tried = case((d.c.attempts > 0, 1), else_=0) if "attempts" in d.c else None
    keys = [_delivery_state(d).label("state"), *([] if tried is None else [tried.label("tried")])]
    unplanned = (select(func.count()).select_from(outbox).where(
        outbox.c.delivered_at.is_(None), ~exists().where(d.c.outbox_id == outbox.c.id))
        if "outbox_id" in d.c else None)
    with engine.connect() as conn:
        by_state = conn.execute(select(*keys, func.count()).group_by(*keys)).all()
        n_unplanned = conn.scalar(unplanned) if unplanned is not None else 0
    counts = {"delivered": 0, "retrying": 0, "queued": 0, "dead": 0, "silenced": 0}
    for row in by_state:
        name, n = row[0], row[-1]
        if name == "pending":
            name = "retrying" if tried is not None and row[1] else "queued"
        counts[name] = counts.get(name, 0) + n
    return {**counts, "unplanned": n_unplanned or 0}


def delivery_receivers(engine: Engine) -> list[str]:
    """Receivers (by name) that have deliveries, for the filter."""
    d = _reflected(engine, "deliveries")
    with engine.connect() as conn:
        return list(conn.scalars(select(d.c.receiver).distinct().order_by(d.c.receiver)))
