"""The notifier: from the outbox to the receivers, at least once, in order per subject and rule.

How it works, and why nothing is lost (the policies, in SPEC-style words: deploy/README.md):

1. *Plan.* Each outbox row the notifier has not seen yet gets one `deliveries` row per receiver
   its routes choose (insert-once on (outbox row, receiver), so planning twice is harmless). A
   resolution goes to every receiver its firing went to, whatever the routes say of `status`,
   and to any other its routes choose. A row routed nowhere is marked done at once.
2. *Send.* Per receiver (one worker thread each, so a slow receiver never slows another), the
   due deliveries with no earlier pending delivery of the same rule and subject to that receiver
   are sent: per (subject, rule) and receiver the notifier is FIFO, so a resolved notification
   never overtakes its firing one, nor the next incident's firing the previous one's resolution.
   Receivers that accept groups (Slack, Alertmanager) get the deliveries of one cluster as one
   message; their deliveries wait `group_wait_ms` after being recorded, so that a storm of one
   cluster's alerts is collected into that one message. Silences are applied here
   (`streaming/notify/policy.py`): a firing a silence holds is decided again when it ends.
3. *Record.* Only a 2xx marks a delivery `delivered`, in a transaction after the response; a
   notifier killed before that resends on restart (a duplicate the receiver drops by
   (alert_id, status)), never skips. Network errors, timeouts, 408, 425, 429 and 5xx are retried
   with exponential backoff and jitter (honouring Retry-After, bounded); any other non-2xx, or a
   failure past `alerting.delivery`'s attempt or age limit, is a dead letter with its reason,
   kept in `deliveries` and in the outbox row's `last_error`; it no longer blocks its subject.
4. *Done.* An outbox row gets `delivered_at` when each of its deliveries is delivered, held,
   silenced or superseded; a row with a dead letter keeps `delivered_at` empty and shows the
   reason. Finished rows of resolved alerts go after `retention_days` (`retention`).

One notifier runs per store at a time (`lease`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import and_, bindparam, exists, select, update
from sqlalchemy.exc import SQLAlchemyError

from streaming.config import FleetwatchConfig
from streaming.notify.lease import Lease
from streaming.notify.policy import (
    HOLD,
    SEND,
    SILENCE,
    Verdict,
    dead_letter_reason,
    firing_verdict,
    parse_retry_after,
    resolution_verdict,
)
from streaming.notify.receivers import HttpRequest, OutgoingAlert, Receiver, build_receivers
from streaming.notify.redact import Scrubber
from streaming.notify.retention import delete_expired
from streaming.notify.routes import Router, group_key
from streaming.notify.silences import Silence, active_silences
from streaming.notify.states import DEAD, DELIVERED, FINAL_OK, HELD, PENDING, SILENCED, SUPERSEDED
from streaming.sinks.store import Store, deliveries, outbox

__all__ = ["Notifier", "NotifierBusy", "NotifyOptions", "Outcome", "describe_counts"]

log = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 425, 429}
GROUP_LIMIT = {"slack": 50, "alertmanager": 500}
NO_RECEIVER = "-"


@dataclass(frozen=True)
class NotifyOptions:
    group_wait_ms: int = 10_000
    interval_ms: int = 1000
    timeout_s: float = 10.0
    retry_base_ms: int = 1000
    retry_max_ms: int = 300_000
    concurrency: int = 4
    batch_limit: int = 200
    lease_ms: int = 30_000
    alertmanager_refresh_ms: int = 120_000
    sweep_ms: int = 10_000
    # Retention (alerting.delivery.retention_days) runs this often, in at most `retention_batches`
    # transactions of `retention_batch_alerts` alerts' notifications each.
    retention_interval_ms: int = 300_000
    retention_batch_alerts: int = 500
    retention_batches: int = 20


@dataclass(frozen=True)
class Outcome:
    ok: bool
    permanent: bool = False
    error: str | None = None
    retry_after_ms: int | None = None


class NotifierBusy(Exception):
    """Another notifier holds the store's lease."""


@dataclass(frozen=True)
class _Row:
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
    body: str

    def item(self) -> OutgoingAlert:
        return OutgoingAlert(self.body, json.loads(self.body))


class Notifier:
    def __init__(self, config: FleetwatchConfig, store: Store, options: NotifyOptions | None = None, *,
                 env: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx.BaseTransport | None = None) -> None:
        # httpx logs every request's URL at INFO, and a receiver URL may be a secret (Slack's is).
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.store = store
        self.options = options or NotifyOptions()
        self.limits = config.alerting.delivery
        self._clock = clock
        self.receivers: dict[str, Receiver] = build_receivers(config.alerting.receivers, env)
        self.router = Router(config.alerting.routes, list(self.receivers), config.clusters)
        self.scrubber = Scrubber(secret for r in self.receivers.values() for secret in r.secrets)
        timeout = httpx.Timeout(self.options.timeout_s, connect=min(self.options.timeout_s, 5.0))
        limits = httpx.Limits(max_connections=self.options.concurrency,
                              max_keepalive_connections=self.options.concurrency)
        self._clients = {name: httpx.Client(timeout=timeout, limits=limits, follow_redirects=False,
                                            transport=transport)
                         for name in self.receivers}
        self._pools = {name: ThreadPoolExecutor(self.options.concurrency, thread_name_prefix=f"notify-{name}")
                       for name in self.receivers}
        self.lease = Lease(store, self.options.lease_ms, self.now_ms)
        self._am_refreshed: dict[str, int] = {}
        self._retention_due_at = 0
        # Receiver-level backoff: consecutive rounds without any success, and until when to wait.
        self._failing_rounds: dict[str, int] = {}
        self._paused_until: dict[str, int] = {}
        self._paused_by_receiver: dict[str, bool] = {}
        self._stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        for client in self._clients.values():
            client.close()

    def _count(self, what: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats[what] += n

    @property
    def stats(self) -> Counter[str]:
        with self._stats_lock:
            return Counter(self._stats)

    # -- planning ----------------------------------------------------------------------------

    def plan(self, limit: int = 1000) -> int:
        """Create the deliveries of outbox rows not planned yet; returns how many were created."""
        created = 0
        while True:
            now = self.now_ms()
            stmt = (select(outbox.c.id, outbox.c.alert_id, outbox.c.status, outbox.c.subject, outbox.c.body,
                           outbox.c.created_at)
                    .where(outbox.c.delivered_at.is_(None),
                           ~exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id)))
                    .order_by(outbox.c.id).limit(limit))
            with self.store.engine.connect() as conn:
                rows = conn.execute(stmt).all()
                # Where the firings of this batch's resolutions went (planned in an earlier pass).
                firing_went = self._firing_receivers(conn, {r.alert_id for r in rows if r.status == "resolved"})
            if not rows:
                return created
            planned: list[dict[str, Any]] = []
            unrouted: list[int] = []
            broken: list[int] = []
            for row in rows:
                base = {"outbox_id": row.id, "alert_id": row.alert_id, "status": row.status,
                        "subject": row.subject, "attempts": 0, "dead_letter": False, "created_at": now}
                try:
                    alert = json.loads(row.body)
                    names = self._receivers_for(alert, firing_went)
                    key = group_key(alert)
                    rule = str(alert["rule"])
                except (ValueError, TypeError, AttributeError, KeyError):
                    broken.append(row.id)
                    planned.append({**base, "receiver": NO_RECEIVER, "rule": "", "group_key": "", "state": DEAD,
                                    "dead_letter": True, "next_attempt_at": now,
                                    "last_error": "the outbox body is not an alert object"})
                    continue
                if row.status != "resolved":
                    firing_went[row.alert_id] = names  # its resolution may be in this same batch
                if not names:
                    unrouted.append(row.id)
                for name in names:
                    wait = self.options.group_wait_ms if self.receivers[name].accepts_groups else 0
                    planned.append({**base, "receiver": name, "rule": rule, "group_key": key, "state": PENDING,
                                    "next_attempt_at": row.created_at + wait, "last_error": None})
            with self.store.engine.begin() as conn:
                self.store._write(conn, deliveries, planned)
                if unrouted:
                    conn.execute(update(outbox).where(outbox.c.id.in_(unrouted), outbox.c.delivered_at.is_(None))
                                 .values(delivered_at=now))
                if broken:
                    conn.execute(update(outbox).where(outbox.c.id.in_(broken))
                                 .values(last_error="dead letter: the outbox body is not an alert object"))
            created += len(planned)
            if broken:
                log.error("outbox rows that are not alert objects", extra={"outbox_ids": broken})
            if len(rows) < limit:
                return created

    @staticmethod
    def _firing_receivers(conn, alert_ids: set[str]) -> dict[str, list[str]]:
        """alert_id -> the receivers its firing was planned to (in planning order)."""
        out: dict[str, list[str]] = {}
        ids = sorted(alert_ids)
        for start in range(0, len(ids), 500):
            for r in conn.execute(select(deliveries.c.alert_id, deliveries.c.receiver)
                                  .where(deliveries.c.alert_id.in_(ids[start:start + 500]),
                                         deliveries.c.status != "resolved", deliveries.c.receiver != NO_RECEIVER)
                                  .order_by(deliveries.c.id)):
                out.setdefault(r.alert_id, []).append(r.receiver)
        return out

    def _receivers_for(self, alert: Mapping[str, Any], firing_went: Mapping[str, list[str]]) -> list[str]:
        """The routes' receivers; for a resolution, first every receiver its firing went to (routes
        matching `status: [firing]` included: what paged must be told it resolved). A firing never
        planned is routed as the routes would route it now."""
        chosen = self.router.receivers_for(alert)
        if alert.get("status") != "resolved":
            return chosen
        went = firing_went.get(alert["alert_id"])
        if went is None:
            went = self.router.receivers_for({**alert, "status": "firing"})
        return [name for name in dict.fromkeys([*went, *chosen]) if name in self.receivers]

    # -- choosing what to send ---------------------------------------------------------------

    def _eligible(self, receiver: Receiver, now: int, limit: int, *, fresh_only: bool = False) -> list[_Row]:
        """Due deliveries at the head of their subject's queue (and, for groups, their cluster's others);
        with fresh_only, only those never tried yet."""
        d, e = deliveries, deliveries.alias("earlier")
        blocked = exists(select(e.c.id).where(e.c.receiver == d.c.receiver, e.c.subject == d.c.subject,
                                              e.c.rule == d.c.rule, e.c.state == PENDING,
                                              e.c.outbox_id < d.c.outbox_id))
        base = (select(d.c.id, d.c.outbox_id, d.c.alert_id, d.c.status, d.c.subject, d.c.group_key, d.c.attempts,
                       d.c.next_attempt_at, d.c.created_at.label("planned_at"), outbox.c.created_at, outbox.c.body)
                .join(outbox, outbox.c.id == d.c.outbox_id)
                .where(d.c.receiver == receiver.name, d.c.state == PENDING, ~blocked))
        if fresh_only:
            base = base.where(d.c.attempts == 0)
        with self.store.engine.connect() as conn:
            due = [_Row(**r._mapping) for r in conn.execute(
                base.where(d.c.next_attempt_at <= now).order_by(d.c.outbox_id).limit(limit))]
            if not receiver.accepts_groups or not due:
                return due
            # The rest of each due cluster's queue heads go along in the same message.
            keys = sorted({r.group_key for r in due})
            more = [_Row(**r._mapping) for r in conn.execute(
                base.where(d.c.group_key.in_(keys), d.c.next_attempt_at > now)
                .order_by(d.c.outbox_id).limit(limit * 4))]
        return sorted(due + more, key=lambda r: r.outbox_id)

    def _silence_verdicts(self, receiver: Receiver, rows: list[_Row], now: int) -> dict[int, Verdict]:
        """delivery id -> what a silence makes of it, for the rows not simply sent now."""
        if not rows:
            return {}
        silences: list[Silence] = active_silences(self.store, min(r.created_at for r in rows))
        resolutions = [r.alert_id for r in rows if r.status == "resolved"]
        firing_state: dict[str, tuple[str, str | None, int]] = {}
        resolved_at: dict[str, int] = {}
        with self.store.engine.connect() as conn:
            for start in range(0, len(resolutions), 500):
                for r in conn.execute(select(deliveries.c.alert_id, deliveries.c.state, deliveries.c.silence_id,
                                             deliveries.c.next_attempt_at)
                                      .where(deliveries.c.receiver == receiver.name,
                                             deliveries.c.status == "firing",
                                             deliveries.c.alert_id.in_(resolutions[start:start + 500]))):
                    firing_state[r.alert_id] = (r.state, r.silence_id, r.next_attempt_at)
            firings = [r.alert_id for r in rows if r.status != "resolved"]
            for start in range(0, len(firings) if silences else 0, 500):
                for alert_id, recorded_at in conn.execute(
                        select(outbox.c.alert_id, outbox.c.created_at)
                        .where(outbox.c.alert_id.in_(firings[start:start + 500]), outbox.c.status == "resolved")):
                    resolved_at[alert_id] = recorded_at
        out: dict[int, Verdict] = {}
        for row in rows:
            if row.status == "resolved":
                state, silence_id, until = firing_state.get(row.alert_id, (None, None, None))
                if state is None and not silences:
                    continue
                verdict = resolution_verdict(json.loads(row.body), row.created_at, now, silences, state, silence_id,
                                             until)
            elif silences:
                verdict = firing_verdict(json.loads(row.body), row.created_at, now, silences,
                                         resolved_at.get(row.alert_id))
            else:
                continue
            if verdict.action != SEND:
                out[row.id] = verdict
        return out

    def _release_held(self, receiver: Receiver) -> None:
        """Decide again the firings held by silences that have ended: page what still fires."""
        now = self.now_ms()
        d = deliveries
        with self.store.engine.connect() as conn:
            held = [_Row(**r._mapping) for r in conn.execute(
                select(d.c.id, d.c.outbox_id, d.c.alert_id, d.c.status, d.c.subject, d.c.group_key, d.c.attempts,
                       d.c.next_attempt_at, d.c.created_at.label("planned_at"), outbox.c.created_at, outbox.c.body)
                .join(outbox, outbox.c.id == d.c.outbox_id)
                .where(d.c.receiver == receiver.name, d.c.state == HELD, d.c.next_attempt_at <= now)
                .order_by(d.c.outbox_id).limit(self.options.batch_limit))]
        if not held:
            return
        verdicts = self._silence_verdicts(receiver, held, now)
        released = [r for r in held if r.id not in verdicts]
        with self.store.engine.begin() as conn:
            self._apply_verdicts(conn, [r for r in held if r.id in verdicts], verdicts, now, from_state=HELD)
            if released:
                conn.execute(update(d).where(d.c.id.in_([r.id for r in released]), d.c.state == HELD)
                             .values(state=PENDING, next_attempt_at=now))
                # Not done any more: it is to be sent.
                conn.execute(update(outbox).where(outbox.c.id.in_(sorted({r.outbox_id for r in released})))
                             .values(delivered_at=None))
        for row in released:
            log.info("silence ended and the alert still fires: sending it", extra={
                "receiver": receiver.name, "alert_id": row.alert_id, "status": row.status})
        for row in held:
            if row.id in verdicts and verdicts[row.id].action == SILENCE:
                log.info("silence ended after the alert resolved: not sent", extra={
                    "receiver": receiver.name, "alert_id": row.alert_id, "silence_id": verdicts[row.id].silence_id})

    def _apply_verdicts(self, conn, rows: list[_Row], verdicts: Mapping[int, Verdict], now: int, *,
                        from_state: str) -> None:
        """Record HOLD and SILENCE verdicts (WAIT leaves the row as it is)."""
        d = deliveries
        changes = [{"did": r.id, "sid": verdicts[r.id].silence_id,
                    "to": HELD if verdicts[r.id].action == HOLD else SILENCED,
                    "next_at": verdicts[r.id].until_ms if verdicts[r.id].action == HOLD else r.next_attempt_at}
                   for r in rows if verdicts[r.id].action in (HOLD, SILENCE)]
        if not changes:
            return
        conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == from_state)
                     .values(state=bindparam("to"), silence_id=bindparam("sid"), next_attempt_at=bindparam("next_at"),
                             last_attempt_at=now), changes)
        changed = {c["did"] for c in changes}
        self._mark_done(conn, sorted({r.outbox_id for r in rows if r.id in changed}), now)

    def _units(self, receiver: Receiver, rows: list[_Row]) -> list[list[_Row]]:
        if not receiver.accepts_groups:
            return [[r] for r in rows]
        size = GROUP_LIMIT.get(receiver.kind, 100)
        groups: dict[str, list[_Row]] = {}
        for row in rows:
            groups.setdefault(row.group_key, []).append(row)
        return [group[i:i + size] for group in groups.values() for i in range(0, len(group), size)]

    # -- sending -----------------------------------------------------------------------------

    def _retry_after(self, response: httpx.Response) -> int | None:
        value = response.headers.get("Retry-After")
        return None if value is None else parse_retry_after(value, self.now_ms(), self.options.retry_max_ms)

    def send(self, receiver: Receiver, request: HttpRequest) -> Outcome:
        try:
            response = self._clients[receiver.name].request(request.method, request.url, content=request.body,
                                                            headers=request.headers)
        except httpx.TimeoutException as exc:
            return Outcome(False, error=f"timed out ({type(exc).__name__})")
        except httpx.HTTPError as exc:
            return Outcome(False, error=self.scrubber.clean(f"{type(exc).__name__}: {exc}"))
        code = response.status_code
        if 200 <= code < 300:
            return Outcome(True)
        text = " ".join(response.text.split())[:300]
        error = self.scrubber.clean(f"HTTP {code} {response.reason_phrase}" + (f": {text}" if text else ""))
        if code >= 500 or code in RETRYABLE_STATUS:
            return Outcome(False, error=error, retry_after_ms=self._retry_after(response))
        if 300 <= code < 400:
            error = self.scrubber.clean(f"HTTP {code} {response.reason_phrase}: redirects are not followed; "
                                        "configure the final URL")
        return Outcome(False, permanent=True, error=error)

    def backoff_ms(self, attempts: int, retry_after_ms: int | None = None) -> int:
        """Exponential backoff with jitter: half the step fixed, half random (never a thundering herd)."""
        step = min(self.options.retry_max_ms, self.options.retry_base_ms * 2 ** min(max(attempts - 1, 0), 30))
        delay = step / 2 + random.uniform(0, step / 2)
        if retry_after_ms is not None:
            delay = max(delay, min(retry_after_ms, self.options.retry_max_ms))
        return int(delay)

    def _deliver(self, receiver: Receiver, unit: list[_Row]) -> Outcome:
        try:
            request = receiver.request([r.item() for r in unit], self.now_ms())
        except (ValueError, KeyError, TypeError) as exc:
            outcome = Outcome(False, permanent=True, error=f"cannot build the message: {type(exc).__name__}: {exc}")
        else:
            outcome = self.send(receiver, request)
        self._record(receiver, unit, outcome)
        return outcome

    def _record(self, receiver: Receiver, unit: list[_Row], outcome: Outcome) -> None:
        now = self.now_ms()
        d = deliveries
        ids = [r.id for r in unit]
        outbox_ids = sorted({r.outbox_id for r in unit})
        info = {"receiver": receiver.name, "alert_ids": [r.alert_id for r in unit[:20]],
                "statuses": sorted({r.status for r in unit}), "messages": len(unit),
                "attempt": max(r.attempts for r in unit) + 1}
        given_up: dict[int, str] = {}
        if not outcome.ok and not outcome.permanent:
            for r in unit:
                reason = dead_letter_reason(r.attempts + 1, r.planned_at, now, self.limits, outcome.error or "")
                if reason is not None:
                    given_up[r.id] = reason
        with self.store.engine.begin() as conn:
            if outcome.ok:
                conn.execute(update(d).where(d.c.id.in_(ids), d.c.state == PENDING)
                             .values(state=DELIVERED, delivered_at=now, last_attempt_at=now,
                                     attempts=d.c.attempts + 1))
            elif outcome.permanent:
                conn.execute(update(d).where(d.c.id.in_(ids), d.c.state == PENDING)
                             .values(state=DEAD, dead_letter=True, last_error=outcome.error, last_attempt_at=now,
                                     attempts=d.c.attempts + 1))
            else:
                retry = [{"did": r.id, "next_at": now + self.backoff_ms(r.attempts + 1, outcome.retry_after_ms)}
                         for r in unit if r.id not in given_up]
                if retry:
                    conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == PENDING)
                                 .values(last_error=outcome.error, last_attempt_at=now, attempts=d.c.attempts + 1,
                                         next_attempt_at=bindparam("next_at")), retry)
                if given_up:
                    conn.execute(update(d).where(d.c.id == bindparam("did"), d.c.state == PENDING)
                                 .values(state=DEAD, dead_letter=True, last_error=bindparam("why"),
                                         last_attempt_at=now, attempts=d.c.attempts + 1),
                                 [{"did": did, "why": why} for did, why in given_up.items()])
            values: dict[str, Any] = {"attempts": outbox.c.attempts + 1}
            if not outcome.ok:
                prefix = "dead letter: " if outcome.permanent or given_up else ""
                values["last_error"] = f"{prefix}{receiver.name}: {next(iter(given_up.values()), outcome.error)}"
            conn.execute(update(outbox).where(outbox.c.id.in_(outbox_ids)).values(**values))
            self._mark_done(conn, outbox_ids, now)
        if outcome.ok:
            self._count("delivered", len(unit))
            log.info("delivered", extra=info)
        elif outcome.permanent:
            self._count("dead", len(unit))
            log.error("dead letter: the receiver refused it", extra={**info, "error": outcome.error})
        else:
            self._count("failed", len(unit) - len(given_up))
            if len(given_up) < len(unit):
                log.warning("delivery failed; will retry", extra={**info, "error": outcome.error})
            if given_up:
                self._count("dead", len(given_up))
                log.error("dead letter: gave up retrying", extra={**info, "error": next(iter(given_up.values()))})

    def _record_verdicts(self, receiver: Receiver, rows: list[_Row], verdicts: Mapping[int, Verdict]) -> None:
        now = self.now_ms()
        with self.store.engine.begin() as conn:
            self._apply_verdicts(conn, rows, verdicts, now, from_state=PENDING)
        for row in rows:
            verdict = verdicts[row.id]
            if verdict.action in (HOLD, SILENCE):
                self._count("silenced")
                log.info("held by a silence" if verdict.action == HOLD else "silenced",
                         extra={"receiver": receiver.name, "alert_id": row.alert_id, "status": row.status,
                                "silence_id": verdict.silence_id})

    @staticmethod
    def _done_condition():
        pending = exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id,
                                                       deliveries.c.state.not_in(FINAL_OK)))
        planned = exists(select(deliveries.c.id).where(deliveries.c.outbox_id == outbox.c.id))
        return and_(outbox.c.delivered_at.is_(None), planned, ~pending)

    def _mark_done(self, conn, outbox_ids: list[int], now: int) -> None:
        conn.execute(update(outbox).where(outbox.c.id.in_(outbox_ids), self._done_condition())
                     .values(delivered_at=now))

    def sweep(self) -> None:
        """Close outbox rows whose deliveries are all done (catches races between receiver threads);
        dead-letter deliveries to receivers no longer configured; apply retention when it is due."""
        now = self.now_ms()
        with self.store.engine.begin() as conn:
            gone = conn.execute(update(deliveries)
                                .where(deliveries.c.state.in_((PENDING, HELD)),
                                       deliveries.c.receiver.not_in(list(self.receivers) or [NO_RECEIVER]))
                                .values(state=DEAD, dead_letter=True, last_attempt_at=now,
                                        last_error="the receiver is no longer configured")).rowcount
            conn.execute(update(outbox).where(self._done_condition()).values(delivered_at=now))
        if gone:
            log.warning("dead-lettered deliveries to receivers no longer configured", extra={"deliveries": gone})
        if now >= self._retention_due_at:
            self.apply_retention()

    def apply_retention(self) -> None:
        """Delete what is older than `alerting.delivery.retention_days` (a bounded amount per call)."""
        now = self.now_ms()
        counts = delete_expired(self.store, now - self.limits.retention_days * 86_400_000,
                                batch_alerts=self.options.retention_batch_alerts,
                                batches=self.options.retention_batches)
        # With more to delete, come back at the next sweep rather than after the whole interval.
        self._retention_due_at = now + (self.options.sweep_ms if counts.more else self.options.retention_interval_ms)
        if counts:
            log.info("retention: deleted old notifications and silences",
                     extra={"outbox": counts.outbox, "deliveries": counts.deliveries, "silences": counts.silences,
                            "more": counts.more, "retention_days": self.limits.retention_days})

    def requeue_dead(self) -> Counter[str]:
        """Put dead letters back in their queues (after a receiver is fixed), keeping order: each
        goes back at its place in its (receiver, subject, rule) queue, so a firing goes before its
        resolution. A dead firing whose resolution has already been delivered to that receiver is
        not sent (it would open a page after its close): it becomes `superseded`. Each requeued
        delivery starts a fresh attempt and age budget. Run it only while holding the lease."""
        now = self.now_ms()
        d, r = deliveries, deliveries.alias("resolution")
        went = exists(select(r.c.id).where(r.c.receiver == d.c.receiver, r.c.alert_id == d.c.alert_id,
                                           r.c.status == "resolved", r.c.state == DELIVERED))
        configured = list(self.receivers) or [NO_RECEIVER]
        with self.store.engine.begin() as conn:
            superseded = conn.execute(
                update(d).where(d.c.state == DEAD, d.c.status != "resolved", d.c.receiver.in_(configured), went)
                .values(state=SUPERSEDED, last_attempt_at=now,
                        last_error="not requeued: its resolution was already delivered")).rowcount
            requeued = conn.execute(
                update(d).where(d.c.state == DEAD, d.c.receiver.in_(configured))
                .values(state=PENDING, dead_letter=False, attempts=0, created_at=now, next_attempt_at=now)).rowcount
            conn.execute(update(outbox).where(self._done_condition()).values(delivered_at=now))
        log.info("dead letters requeued", extra={"requeued": requeued, "superseded": superseded})
        return Counter(requeued=requeued, superseded=superseded)

    def run_receiver_pass(self, name: str, stop: threading.Event | None = None) -> None:
        """Send everything due to one receiver (each delivery at most once per pass)."""
        receiver = self.receivers[name]
        if self.lease.held:
            self._release_held(receiver)
        # A paused receiver (nothing got through lately) still gets notifications never tried yet, a
        # few per pass: one notification it keeps failing must not delay every other by the pause.
        # Unless the receiver itself asked for the pause (Retry-After).
        fresh_only = self.now_ms() < self._paused_until.get(name, 0)
        if fresh_only and self._paused_by_receiver.get(name):
            return
        attempted: set[int] = set()
        while self.lease.held and not (stop is not None and stop.is_set()):
            now = self.now_ms()
            # A receiver that has been failing is probed with a few requests, not the whole backlog.
            failing = fresh_only or self._failing_rounds.get(name)
            limit = self.options.concurrency if failing else self.options.batch_limit
            rows = [r for r in self._eligible(receiver, now, limit, fresh_only=fresh_only) if r.id not in attempted]
            if not rows:
                break
            attempted.update(r.id for r in rows)
            verdicts = self._silence_verdicts(receiver, rows, now)
            if verdicts:
                self._record_verdicts(receiver, [r for r in rows if r.id in verdicts], verdicts)
                rows = [r for r in rows if r.id not in verdicts]
            futures = [self._pools[name].submit(self._deliver, receiver, unit) for unit in self._units(receiver, rows)]
            wait_futures(futures)
            outcomes = [future.result() for future in futures]
            if outcomes and not any(o.ok or o.permanent for o in outcomes):
                if fresh_only:
                    return  # still failing: the pause stands
                # Nothing got through: the receiver is down or overloaded. Back off as a whole.
                rounds = self._failing_rounds.get(name, 0) + 1
                self._failing_rounds[name] = rounds
                asked = max((o.retry_after_ms or 0) for o in outcomes) or None
                pause = self.backoff_ms(rounds, asked)
                self._paused_until[name] = self.now_ms() + pause
                self._paused_by_receiver[name] = asked is not None
                log.warning("receiver is failing; pausing it", extra={"receiver": name, "rounds": rounds,
                                                                      "pause_ms": pause})
                return
            if any(o.ok for o in outcomes):
                self._failing_rounds.pop(name, None)
                self._paused_until.pop(name, None)
                fresh_only = False
        if receiver.kind == "alertmanager" and self.lease.held:
            self._refresh_alertmanager(receiver)

    def _refresh_alertmanager(self, receiver: Receiver) -> None:
        """Re-send open firing alerts so that Alertmanager does not time them out (like Prometheus)."""
        now = self.now_ms()
        if now - self._am_refreshed.setdefault(receiver.name, now) < self.options.alertmanager_refresh_ms:
            return
        self._am_refreshed[receiver.name] = now
        resolved = outbox.alias("resolved")
        stmt = (select(outbox.c.body).join(deliveries, deliveries.c.outbox_id == outbox.c.id)
                .where(deliveries.c.receiver == receiver.name, deliveries.c.status == "firing",
                       deliveries.c.state == DELIVERED,
                       ~exists(select(resolved.c.id).where(resolved.c.alert_id == deliveries.c.alert_id,
                                                           resolved.c.status == "resolved")))
                .order_by(outbox.c.id))
        with self.store.engine.connect() as conn:
            bodies = list(conn.scalars(stmt))
        size = GROUP_LIMIT["alertmanager"]
        for start in range(0, len(bodies), size):
            items = [OutgoingAlert(b, json.loads(b)) for b in bodies[start:start + size]]
            outcome = self.send(receiver, receiver.request(items, now))
            if not outcome.ok:
                self._am_refreshed[receiver.name] = now - self.options.alertmanager_refresh_ms // 2
                log.warning("refreshing open alerts failed", extra={"receiver": receiver.name,
                                                                     "error": outcome.error})
                return
        if bodies:
            log.info("refreshed open alerts", extra={"receiver": receiver.name, "alerts": len(bodies)})

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None, *, once: bool = False,
            requeue_dead: bool = False) -> Counter[str]:
        """Deliver until `stop` is set (or, with once, one pass over what is due). Returns the counts.
        With requeue_dead, dead letters are requeued first, once the lease is held."""
        stop = stop or threading.Event()
        interval = self.options.interval_ms / 1000
        waiting_logged = 0.0
        while not self._try(self.lease.acquire, default=False):
            if once:
                raise NotifierBusy(f"another notifier ({self.lease.holder}) is delivering from this store")
            if time.monotonic() - waiting_logged > 60:
                log.info("another notifier holds the lease; waiting", extra={"holder": self.lease.holder})
                waiting_logged = time.monotonic()
            if stop.wait(min(interval * 5, self.options.lease_ms / 1000)):
                return self.stats
        log.info("notifier started", extra={"receivers": [r.describe() for r in self.receivers.values()],
                                            "once": once, "group_wait_ms": self.options.group_wait_ms})
        if requeue_dead:
            self._stats.update(self.requeue_dead())
        workers = {name: ThreadPoolExecutor(1, thread_name_prefix=f"receiver-{name}") for name in self.receivers}
        running: dict[str, Future[None]] = {}
        swept = self.now_ms()
        try:
            while not stop.is_set():
                if not self._try(self.lease.renew_if_due, default=False):
                    log.warning("lost the notifier lease; pausing", extra={"holder": self.lease.holder})
                    stop.wait(interval)
                    continue
                self._try(self.plan, default=0)
                for name, worker in workers.items():
                    future = running.get(name)
                    if future is None or future.done():
                        if future is not None:
                            self._try(future.result, default=None, broad=True)
                        running[name] = worker.submit(self.run_receiver_pass, name, stop)
                if once:
                    pending = set(running.values())
                    while pending:
                        _, pending = wait_futures(pending, timeout=max(1.0, self.options.lease_ms / 3000))
                        self._try(self.lease.renew_if_due, default=False)
                    for future in running.values():
                        self._try(future.result, default=None, broad=True)
                    self._try(self.sweep, default=None)
                    break
                if self.now_ms() - swept >= self.options.sweep_ms:
                    self._try(self.sweep, default=None)
                    swept = self.now_ms()
                stop.wait(interval)
        finally:
            for worker in workers.values():
                worker.shutdown(wait=True)
            self.lease.release()
        return self.stats

    def _try(self, fn: Callable[[], Any], default: Any, *, broad: bool = False) -> Any:
        """Run one step; a database or network exception (with broad: any) is logged and the loop goes on."""
        try:
            return fn()
        except Exception as exc:
            if not broad and not isinstance(exc, (SQLAlchemyError, httpx.HTTPError, OSError)):
                raise
            self._count("errors")
            extra = {"step": getattr(fn, "__name__", str(fn)),
                     "error": self.scrubber.clean(f"{type(exc).__name__}: {exc}")}
            if not isinstance(exc, (SQLAlchemyError, httpx.HTTPError, OSError)):
                extra["trace"] = self.scrubber.clean("".join(traceback.format_exception(exc)))
            log.error("notifier step failed; retrying next round", extra=extra)
            return default


def describe_counts(counts: Mapping[str, int],
                    keys: Iterable[str] = ("delivered", "failed", "dead", "silenced")) -> str:
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in keys)
