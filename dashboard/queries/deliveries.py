"""The deliveries page's queries over the notifier's `deliveries` table, read as the database has it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Engine, MetaData, Table, case, exists, func, literal, select

from dashboard.queries.shared import Row, fetch_rows
from streaming.store import alerts, outbox

__all__ = ["DELIVERY_COLUMNS", "delivery_counts", "delivery_list", "delivery_receivers"]


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
    rows = fetch_rows(engine, stmt)
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
