"""The notifier's reads and writes of the outbox and `deliveries` (streaming/notify/delivery.py
says what they are for): planning, the queue heads due per receiver, silences' verdicts, the
outcome of a send, sweeping and requeueing dead letters.

What it reads of an outbox row carries its body read once (outbox_bodies.py): the alert, and the
object as stored that receivers send; the notifier never parses a body itself.

Every write that finishes a delivery also closes the outbox rows whose deliveries are then all
done (`delivered_at`), in the same transaction. The write that records a send's outcome is
fenced: it first checks, in its transaction and holding the lease row, that the notifier lease
still has the sender's owner and generation (`LeaseFence`), and writes nothing otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Row, and_, bindparam, exists, select, update

from streaming.records.alert import Alert
from streaming.store.database import Store
from streaming.store.delivery_states import DEAD, DELIVERED, FINAL_OK, HELD, PENDING, SUPERSEDED
from streaming.store.job_tables import outbox
from streaming.store.notifier_tables import deliveries, notifier_lease
from streaming.store.outbox_bodies import NotAnAlert, read_body

__all__ = ["NO_RECEIVER", "DeliveredFiring", "DeliveryQueue", "LeaseFence", "OutboxEntry", "QueuedDelivery",
           "StateChange"]

# The receiver of the dead letter planned for an outbox row that is not an alert object.
NO_RECEIVER = "-"


@dataclass(frozen=True)
class OutboxEntry:
    """An outbox row not planned yet, with the alert of its body (or why it is none)."""

    id: int
    alert_id: str
    status: str
    subject: str
    created_at: int  # when the outbox row was recorded
    alert: Alert | NotAnAlert


@dataclass(frozen=True)
class QueuedDelivery:
    """A delivery waiting to be sent (pending, or held by a silence), with its outbox row's alert (or
    why its body is none) and the object as stored, which receivers send."""

    id: int
    outbox_id: int
    alert_id: str
    status: str
    subject: str
    group_key: str
    attempts: int
    next_attempt_at: int
    planned_at: int  # when this delivery was planned: the dead-letter age counts from here
    created_at: int  # when the outbox row was recorded
    alert: Alert | NotAnAlert
    stored: Mapping[str, Any]


@dataclass(frozen=True)
class DeliveredFiring:
    """A firing delivered to a receiver, with its alert (or why its body is none), the object as
    stored, and the fleet incident it was delivered under (None: on its own)."""

    alert: Alert | NotAnAlert
    stored: Mapping[str, Any]
    incident_id: str | None
    incident_domain: str | None


@dataclass(frozen=True)
class LeaseFence:
    """The notifier lease's tenure a write belongs to: refused once another notifier took over."""

    name: str
    owner: str
    generation: int


@dataclass(frozen=True)
class StateChange:
    """A delivery a silence holds (until `next_attempt_at`) or silences for good."""

    delivery_id: int
    outbox_id: int
    state: str
    silence_id: str | None
    next_attempt_at: int


def _queued_columns():
    d = deliveries
    return (d.c.id, d.c.outbox_id, d.c.alert_id, d.c.status, d.c.subject, d.c.group_key, d.c.attempts,
            d.c.next_attempt_at, d.c.created_at.label("planned_at"), outbox.c.created_at, outbox.c.body)


def _queued(row: Row[Any]) -> QueuedDelivery:
    columns = dict(row._mapping)
    alert, stored = read_body(columns.pop("body"))
    return QueuedDelivery(**columns, alert=alert, stored=stored)


def _done_condition():
    pending = exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id,
                                                   deliveries.c.state.not_in(FINAL_OK)))
    planned = exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id))
    return and_(outbox.c.delivered_at.is_(None), planned, ~pending)


def _mark_done(conn, outbox_ids: Sequence[int], now: int) -> None:
    conn.execute(update(outbox).where(outbox.c.id.in_(outbox_ids), _done_condition()).values(delivered_at=now))


def _chunks(items: Sequence[str], size: int = 500) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class DeliveryQueue:
    """The outbox and `deliveries` of one store, as the notifier uses them."""

    def __init__(self, store: Store) -> None:
        self.store = store

    # -- planning ----------------------------------------------------------------------------

    def unplanned(self, limit: int) -> tuple[list[OutboxEntry], dict[str, list[str]]]:
        """Outbox rows with no deliveries yet (outbox order), and alert_id -> the receivers the
        firings of their resolutions were planned to (in planning order)."""
        stmt = (select(outbox.c.id, outbox.c.alert_id, outbox.c.status, outbox.c.subject, outbox.c.body,
                       outbox.c.created_at)
                .where(outbox.c.delivered_at.is_(None),
                       ~exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id)))
                .order_by(outbox.c.id).limit(limit))
        firing_went: dict[str, list[str]] = {}
        with self.store.engine.connect() as conn:
            rows = [OutboxEntry(r.id, r.alert_id, r.status, r.subject, r.created_at, read_body(r.body)[0])
                    for r in conn.execute(stmt)]
            for ids in _chunks(sorted({r.alert_id for r in rows if r.status == "resolved"})):
                for r in conn.execute(select(deliveries.c.alert_id, deliveries.c.receiver)
                                      .where(deliveries.c.alert_id.in_(ids), deliveries.c.status != "resolved",
                                             deliveries.c.receiver != NO_RECEIVER)
                                      .order_by(deliveries.c.id)):
                    firing_went.setdefault(r.alert_id, []).append(r.receiver)
        return rows, firing_went

    def save_plan(self, planned: list[dict[str, Any]], unrouted: list[int], broken: list[int], now: int,
                  broken_error: str) -> None:
        """Insert the planned deliveries; outbox rows routed nowhere are done, broken ones say why."""
        with self.store.engine.begin() as conn:
            self.store._write(conn, deliveries, planned)
            if unrouted:
                conn.execute(update(outbox).where(outbox.c.id.in_(unrouted), outbox.c.delivered_at.is_(None))
                             .values(delivered_at=now))
            if broken:
                conn.execute(update(outbox).where(outbox.c.id.in_(broken)).values(last_error=broken_error))

    # -- what to send ------------------------------------------------------------------------

    def due(self, receiver: str, now: int, limit: int, *, grouped: bool, fresh_only: bool) -> list[QueuedDelivery]:
        """Due deliveries at the head of their (subject, rule) queue, in outbox order; with `grouped`,
        the other queue heads of their groups too (sent in the same message); with `fresh_only`,
        only those never tried yet."""
        d, e = deliveries, deliveries.alias("earlier")
        blocked = exists(select(e.c.id).where(e.c.receiver == d.c.receiver, e.c.subject == d.c.subject,
                                              e.c.rule == d.c.rule, e.c.state == PENDING,
                                              e.c.outbox_id < d.c.outbox_id))
        base = (select(*_queued_columns()).join(outbox, outbox.c.id == d.c.outbox_id)
                .where(d.c.receiver == receiver, d.c.state == PENDING, ~blocked))
        if fresh_only:
            base = base.where(d.c.attempts == 0)
        with self.store.engine.connect() as conn:
            due = [_queued(r) for r in conn.execute(
                base.where(d.c.next_attempt_at <= now).order_by(d.c.outbox_id).limit(limit))]
            if not grouped or not due:
                return due
            keys = sorted({r.group_key for r in due})
            more = [_queued(r) for r in conn.execute(
                base.where(d.c.group_key.in_(keys), d.c.next_attempt_at > now)
                .order_by(d.c.outbox_id).limit(limit * 4))]
        return sorted(due + more, key=lambda r: r.outbox_id)

    def held_due(self, receiver: str, now: int, limit: int) -> list[QueuedDelivery]:
        """Firings held by silences whose hold has ended, in outbox order."""
        d = deliveries
        with self.store.engine.connect() as conn:
            return [_queued(r) for r in conn.execute(
                select(*_queued_columns()).join(outbox, outbox.c.id == d.c.outbox_id)
                .where(d.c.receiver == receiver, d.c.state == HELD, d.c.next_attempt_at <= now)
                .order_by(d.c.outbox_id).limit(limit))]

    def firing_states(self, receiver: str, alert_ids: Sequence[str]) -> dict[str, tuple[str, str | None, int]]:
        """alert_id -> (state, silence_id, next_attempt_at) of its firing's delivery to `receiver`."""
        out: dict[str, tuple[str, str | None, int]] = {}
        with self.store.engine.connect() as conn:
            for ids in _chunks(alert_ids):
                for r in conn.execute(select(deliveries.c.alert_id, deliveries.c.state, deliveries.c.silence_id,
                                             deliveries.c.next_attempt_at)
                                      .where(deliveries.c.receiver == receiver, deliveries.c.status == "firing",
                                             deliveries.c.alert_id.in_(ids))):
                    out[r.alert_id] = (r.state, r.silence_id, r.next_attempt_at)
        return out

    def resolutions_recorded(self, alert_ids: Sequence[str]) -> dict[str, int]:
        """alert_id -> when its resolution was recorded in the outbox, for those resolved."""
        out: dict[str, int] = {}
        with self.store.engine.connect() as conn:
            for ids in _chunks(alert_ids):
                for alert_id, recorded_at in conn.execute(
                        select(outbox.c.alert_id, outbox.c.created_at)
                        .where(outbox.c.alert_id.in_(ids), outbox.c.status == "resolved")):
                    out[alert_id] = recorded_at
        return out

    def open_firings(self, receiver: str, incident_id: str | None = None) -> list[DeliveredFiring]:
        """The firings delivered to `receiver` whose alert has not resolved (outbox order); with
        `incident_id`, only those delivered under that incident."""
        resolved = outbox.alias("resolved")
        stmt = (select(outbox.c.body, deliveries.c.incident_id, deliveries.c.incident_domain)
                .join(deliveries, deliveries.c.outbox_id == outbox.c.id)
                .where(deliveries.c.receiver == receiver, deliveries.c.status == "firing",
                       deliveries.c.state == DELIVERED,
                       ~exists(select(resolved.c.id).where(resolved.c.alert_id == deliveries.c.alert_id,
                                                           resolved.c.status == "resolved")))
                .order_by(outbox.c.id))
        if incident_id is not None:
            stmt = stmt.where(deliveries.c.incident_id == incident_id)
        with self.store.engine.connect() as conn:
            return [DeliveredFiring(*read_body(r.body), r.incident_id, r.incident_domain) for r in conn.execute(stmt)]

    def incident_tags(self, receiver: str, alert_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """alert_id -> (incident_id, incident_domain) of its firing delivered to `receiver` under a
        fleet incident (those that went on their own are absent)."""
        d = deliveries
        out: dict[str, tuple[str, str]] = {}
        with self.store.engine.connect() as conn:
            for ids in _chunks(alert_ids):
                for r in conn.execute(select(d.c.alert_id, d.c.incident_id, d.c.incident_domain)
                                      .where(d.c.receiver == receiver, d.c.status == "firing", d.c.state == DELIVERED,
                                             d.c.incident_id.is_not(None), d.c.alert_id.in_(ids))):
                    out[r.alert_id] = (r.incident_id, r.incident_domain or "")
        return out

    # -- recording ---------------------------------------------------------------------------

    @staticmethod
    def _apply_changes(conn, changes: Sequence[StateChange], now: int, *, from_state: str) -> None:
        if not changes:
            return
        d = deliveries
        conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == from_state)
                     .values(state=bindparam("to"), silence_id=bindparam("sid"), next_attempt_at=bindparam("next_at"),
                             last_attempt_at=now),
                     [{"did": c.delivery_id, "sid": c.silence_id, "to": c.state, "next_at": c.next_attempt_at}
                      for c in changes])
        _mark_done(conn, sorted({c.outbox_id for c in changes}), now)

    def change_pending(self, changes: Sequence[StateChange], now: int) -> None:
        """Hold or silence pending deliveries."""
        with self.store.engine.begin() as conn:
            self._apply_changes(conn, changes, now, from_state=PENDING)

    def settle_held(self, changes: Sequence[StateChange], released: Sequence[QueuedDelivery], now: int) -> None:
        """Held deliveries whose silence ended: silence (or hold again) `changes`, send `released` now."""
        d = deliveries
        with self.store.engine.begin() as conn:
            self._apply_changes(conn, changes, now, from_state=HELD)
            if released:
                conn.execute(update(d).where(d.c.id.in_([r.id for r in released]), d.c.state == HELD)
                             .values(state=PENDING, next_attempt_at=now))
                # Not done any more: it is to be sent.
                conn.execute(update(outbox).where(outbox.c.id.in_(sorted({r.outbox_id for r in released})))
                             .values(delivered_at=None))

    def record_outcome(self, unit: Sequence[QueuedDelivery], now: int, *, delivered: bool, permanent: bool,
                       error: str | None, retry_at: dict[int, int], given_up: dict[int, str],
                       outbox_error: str | None, fence: LeaseFence | None = None,
                       incident: tuple[str, str] | None = None) -> bool:
        """What one send did to its deliveries: delivered (under `incident`, (incident_id, domain),
        when it was a fleet incident's notification); refused for good (dead, with `error`); or
        failed, to retry at `retry_at` (delivery id -> when) with `error`, except those `given_up`
        (delivery id -> why: dead). Every outbox row counts an attempt and shows `outbox_error`.
        With a `fence`, nothing is written (False) unless the lease is still that tenure's."""
        d = deliveries
        ids = [r.id for r in unit]
        outbox_ids = sorted({r.outbox_id for r in unit})
        with self.store.engine.begin() as conn:
            if fence is not None:
                # A write to the lease row first: PostgreSQL locks the row and SQLite takes its write
                # lock, so no takeover commits between this check and the writes below.
                lease = notifier_lease
                held = conn.execute(update(lease).where(lease.c.name == fence.name, lease.c.owner == fence.owner,
                                                        lease.c.generation == fence.generation)
                                    .values(generation=lease.c.generation)).rowcount == 1
                if not held:
                    return False
            if delivered:
                conn.execute(update(d).where(d.c.id.in_(ids), d.c.state == PENDING)
                             .values(state=DELIVERED, delivered_at=now, last_attempt_at=now,
                                     attempts=d.c.attempts + 1, incident_id=None if incident is None else incident[0],
                                     incident_domain=None if incident is None else incident[1]))
            elif permanent:
                conn.execute(update(d).where(d.c.id.in_(ids), d.c.state == PENDING)
                             .values(state=DEAD, dead_letter=True, last_error=error, last_attempt_at=now,
                                     attempts=d.c.attempts + 1))
            else:
                if retry_at:
                    conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == PENDING)
                                 .values(last_error=error, last_attempt_at=now, attempts=d.c.attempts + 1,
                                         next_attempt_at=bindparam("next_at")),
                                 [{"did": did, "next_at": at} for did, at in retry_at.items()])
                if given_up:
                    conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == PENDING)
                                 .values(state=DEAD, dead_letter=True, last_error=bindparam("why"),
                                         last_attempt_at=now, attempts=d.c.attempts + 1),
                                 [{"did": did, "why": why} for did, why in given_up.items()])
            values: dict[str, Any] = {"attempts": outbox.c.attempts + 1}
            if outbox_error is not None:
                values["last_error"] = outbox_error
            conn.execute(update(outbox).where(outbox.c.id.in_(outbox_ids)).values(**values))
            _mark_done(conn, outbox_ids, now)
        return True

    # -- upkeep ------------------------------------------------------------------------------

    def sweep(self, configured: Sequence[str], now: int) -> int:
        """Dead-letter what waits for receivers no longer configured and close the outbox rows that
        are done; returns the deliveries dead-lettered."""
        with self.store.engine.begin() as conn:
            gone = conn.execute(update(deliveries)
                                .where(deliveries.c.state.in_((PENDING, HELD)),
                                       deliveries.c.receiver.not_in(list(configured) or [NO_RECEIVER]))
                                .values(state=DEAD, dead_letter=True, last_attempt_at=now,
                                        last_error="the receiver is no longer configured")).rowcount
            conn.execute(update(outbox).where(_done_condition()).values(delivered_at=now))
        return gone

    def requeue_dead(self, configured: Sequence[str], now: int) -> tuple[int, int]:
        """Dead letters of configured receivers back to pending (a fresh attempt and age budget), in
        place in their queues; a dead firing whose resolution that receiver already got is
        superseded instead. Returns (requeued, superseded)."""
        d, r = deliveries, deliveries.alias("resolution")
        went = exists(select(r.c.id).where(r.c.receiver == d.c.receiver, r.c.alert_id == d.c.alert_id,
                                           r.c.status == "resolved", r.c.state == DELIVERED))
        receivers = list(configured) or [NO_RECEIVER]
        with self.store.engine.begin() as conn:
            superseded = conn.execute(
                update(d).where(d.c.state == DEAD, d.c.status != "resolved", d.c.receiver.in_(receivers), went)
                .values(state=SUPERSEDED, last_attempt_at=now,
                        last_error="not requeued: its resolution was already delivered")).rowcount
            requeued = conn.execute(
                update(d).where(d.c.state == DEAD, d.c.receiver.in_(receivers))
                .values(state=PENDING, dead_letter=False, attempts=0, created_at=now, next_attempt_at=now)).rowcount
            conn.execute(update(outbox).where(_done_condition()).values(delivered_at=now))
        return requeued, superseded
