"""Retention of the notifier's tables (deploy/README.md, "Retention").

An alert's notifications (its outbox rows, firing and resolved, and their deliveries) are deleted
together once the alert is resolved and every one of them has been finished (delivered,
silenced, superseded or dead) for longer than the retention. The firing notifications of an
alert still open are kept however old: its resolution is routed to wherever they went, and
Alertmanager's copy is refreshed from them. Ended silences older than the retention go too.
Deletes run in bounded batches (one transaction each), so a large backlog never holds the
store's write lock for long.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, delete, exists, func, not_, or_, select
from sqlalchemy.sql.selectable import NamedFromClause

from streaming.store.database import Store
from streaming.store.delivery_states import HELD, PENDING
from streaming.store.job_tables import outbox
from streaming.store.notifier_tables import deliveries, silences

__all__ = ["RetentionCounts", "delete_expired_notifications"]


@dataclass(frozen=True)
class RetentionCounts:
    outbox: int = 0
    deliveries: int = 0
    silences: int = 0
    more: bool = False  # the batch limit was reached: there is more to delete next time

    def __bool__(self) -> bool:
        return bool(self.outbox or self.deliveries or self.silences)


def _finished_before(o: NamedFromClause, cutoff: int) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    """(delivered before the cutoff, dead letters only whose last attempt is before the cutoff) for outbox rows `o`."""
    d = deliveries
    planned = exists(select(d.c.id).where(d.c.outbox_id == o.c.id))
    live = exists(select(d.c.id).where(d.c.outbox_id == o.c.id,
                                       or_(d.c.state.in_((PENDING, HELD)),
                                           func.coalesce(d.c.last_attempt_at, d.c.created_at) >= cutoff)))
    return o.c.delivered_at < cutoff, and_(o.c.delivered_at.is_(None), planned, ~live)


def _expired_alert_ids(conn, cutoff: int, limit: int) -> list[str]:
    resolved, firing = outbox.alias("resolved"), outbox.alias("firing")
    firing_delivered, firing_dead = _finished_before(firing, cutoff)
    unfinished_firing = exists(select(firing.c.id).where(firing.c.alert_id == resolved.c.alert_id,
                                                         firing.c.status != "resolved",
                                                         not_(or_(firing_delivered, firing_dead))))
    delivered, dead = _finished_before(resolved, cutoff)
    ids: list[str] = []
    # Two queries, so that the common one (delivered before the cutoff) is a range on the index.
    for finished in (delivered, dead):
        if len(ids) < limit:
            ids += conn.scalars(select(resolved.c.alert_id)
                                .where(resolved.c.status == "resolved", finished, ~unfinished_firing)
                                .order_by(resolved.c.id).limit(limit - len(ids))).all()
    return list(dict.fromkeys(ids))


def delete_expired_notifications(store: Store, cutoff_ms: int, *, batch_alerts: int = 500,
                                 batches: int = 20) -> RetentionCounts:
    """Delete what is older than `cutoff_ms`: at most `batches` batches of `batch_alerts` alerts'
    notifications, and as many batches of ended silences."""
    n_outbox = n_deliveries = n_silences = 0
    more = False
    for _ in range(batches):
        with store.engine.begin() as conn:
            ids = _expired_alert_ids(conn, cutoff_ms, batch_alerts)
            if ids:
                rows = select(outbox.c.id).where(outbox.c.alert_id.in_(ids))
                n_deliveries += conn.execute(delete(deliveries).where(deliveries.c.outbox_id.in_(rows))).rowcount
                n_outbox += conn.execute(delete(outbox).where(outbox.c.alert_id.in_(ids))).rowcount
            ended = conn.scalars(select(silences.c.id).where(silences.c.ends_at < cutoff_ms)
                                 .order_by(silences.c.ends_at).limit(batch_alerts)).all()
            if ended:
                n_silences += conn.execute(delete(silences).where(silences.c.id.in_(ended))).rowcount
        more = len(ids) == batch_alerts or len(ended) == batch_alerts
        if not more:
            break
    return RetentionCounts(n_outbox, n_deliveries, n_silences, more)
