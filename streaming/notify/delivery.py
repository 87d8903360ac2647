"""The notifier: from the outbox to the receivers, at least once, in order per subject and rule.

How it works, and why nothing is lost (the policies, in SPEC-style words: deploy/README.md):

1. *Plan* (`planning.py`). Each outbox row the notifier has not seen yet gets one `deliveries` row per receiver
   its routes choose (insert-once on (outbox row, receiver), so planning twice is harmless). A
   resolution goes to every receiver its firing went to, whatever the routes say of `status`,
   and to any other its routes choose. A row routed nowhere is marked done at once.
2. *Send.* Per receiver (one worker thread each, so a slow receiver never slows another), the
   due deliveries with no earlier pending delivery of the same rule and subject to that receiver
   are sent: per (subject, rule) and receiver the notifier is FIFO, so a resolved notification
   never overtakes its firing one, nor the next incident's firing the previous one's resolution.
   Receivers that accept groups (Slack, Alertmanager) get the deliveries of one cluster as one
   message; their deliveries wait `group_wait_ms` after being recorded (at the latest, the notifier's
   now: planning.py), so a storm of one cluster's alerts is one message. Silences are applied here
   (`streaming/notify/policy.py`): a firing a silence holds is decided again when it ends.
   HTTP (each attempt under one deadline for the whole of it) and the backoff: `sending.py`. The
   members of a fleet incident go as one notification (`incidents.py`).
3. *Record.* Only a 2xx marks a delivery `delivered`, in a transaction after the response; a
   notifier killed before that resends on restart (a duplicate the receiver drops by
   (alert_id, status)), never skips. Network errors, timeouts, 408, 425, 429 and 5xx are retried
   with exponential backoff and jitter (honouring Retry-After, bounded); any other non-2xx, or a
   failure past `alerting.delivery`'s attempt or age limit, is a dead letter with its reason,
   kept in `deliveries` and in the outbox row's `last_error`; it no longer blocks its subject.
4. *Done.* An outbox row gets `delivered_at` when each of its deliveries is delivered, held,
   silenced or superseded; a row with a dead letter keeps `delivered_at` empty and shows the
   reason. Finished rows of resolved alerts go after `retention_days` (`retention`).

One notifier runs per store at a time (`lease.py`: a lease on the database's clock, never the
hosts'; its generation fences the writes). A send starts only while the lease covers the whole
attempt (its deadline), and its outcome is recorded only if the lease is still this tenure's: a
deposed notifier's late write is refused (the new holder sends that notification again). Its SQL
is `streaming.store.DeliveryQueue`.
"""

from __future__ import annotations

import logging
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
from sqlalchemy.exc import SQLAlchemyError

from streaming.config import FleetwatchConfig
from streaming.notify.incidents import IncidentUnits, tag_of
from streaming.notify.lease import Lease
from streaming.notify.planning import Planner
from streaming.notify.policy import (
    HOLD,
    SEND,
    SILENCE,
    Verdict,
    dead_letter_reason,
    firing_verdict,
    resolution_verdict,
)
from streaming.notify.receivers import IncidentNotice, OutgoingAlert, Receiver, build_receivers
from streaming.notify.routes import Router
from streaming.notify.sending import NOT_SENT, Outcome, Sender
from streaming.plumbing.errors import NotifierBusy
from streaming.plumbing.redact import Scrubber
from streaming.store import (
    HELD,
    SILENCED,
    DeliveryQueue,
    NotAnAlert,
    QueuedDelivery,
    StateChange,
    Store,
    active_silences,
    delete_expired_notifications,
)

__all__ = ["Notifier", "NotifierBusy", "NotifyOptions", "describe_counts"]

log = logging.getLogger(__name__)

GROUP_LIMIT = {"slack": 50, "alertmanager": 500}


@dataclass(frozen=True)
class NotifyOptions:
    group_wait_ms: int = 10_000
    interval_ms: int = 1000
    timeout_s: float | None = None  # one attempt's deadline; None: alerting.delivery.attempt_timeout_ms
    retry_base_ms: int = 1000
    retry_max_ms: int = 300_000
    concurrency: int = 4
    batch_limit: int = 200
    lease_ms: int | None = None  # None: alerting.delivery.lease_ms
    alertmanager_refresh_ms: int = 120_000
    sweep_ms: int = 10_000
    # Retention (alerting.delivery.retention_days) runs this often, in at most `retention_batches`
    # transactions of `retention_batch_alerts` alerts' notifications each.
    retention_interval_ms: int = 300_000
    retention_batch_alerts: int = 500
    retention_batches: int = 20


def _outgoing(rows: Iterable[QueuedDelivery]) -> dict[int, OutgoingAlert | NotAnAlert]:
    """delivery id -> what its receiver is sent: the alert and stored object the queue read (once);
    or, for a body that is not an alert object, why (its send fails for good)."""
    return {r.id: r.alert if isinstance(r.alert, NotAnAlert) else OutgoingAlert(r.alert, r.stored) for r in rows}


def _state_change(delivery: QueuedDelivery, verdict: Verdict) -> StateChange:
    hold = verdict.action == HOLD
    return StateChange(delivery.id, delivery.outbox_id, HELD if hold else SILENCED, verdict.silence_id,
                       verdict.until_ms if hold else delivery.next_attempt_at)


class Notifier:
    def __init__(self, config: FleetwatchConfig, store: Store, options: NotifyOptions | None = None, *,
                 env: Mapping[str, str] | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        # httpx logs every request's URL at INFO, and a receiver URL may be a secret (Slack's is).
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.WARNING)
        self.store = store
        self.queue = DeliveryQueue(store)
        self.options = options or NotifyOptions()
        self.limits = config.alerting.delivery
        self.attempt_s = (self.options.timeout_s if self.options.timeout_s is not None
                          else self.limits.attempt_timeout_ms / 1000)
        self._clock = clock
        self.receivers: dict[str, Receiver] = build_receivers(config.alerting.receivers, env, config.alerting)
        self.incidents = IncidentUnits(self.queue, config, self.now_ms)
        self.planner = Planner(self.queue, Router(config.alerting.routes, list(self.receivers), config.clusters),
                               self.receivers, self.options.group_wait_ms, self.now_ms, self.incidents.wait_ms)
        self.scrubber = Scrubber(secret for r in self.receivers.values() for secret in r.secrets)
        self.sender = Sender(self.receivers.values(), self.scrubber, self.now_ms, timeout_s=self.attempt_s,
                             concurrency=self.options.concurrency, retry_base_ms=self.options.retry_base_ms,
                             retry_max_ms=self.options.retry_max_ms, transport=transport)
        self._pools = {name: ThreadPoolExecutor(self.options.concurrency, thread_name_prefix=f"notify-{name}")
                       for name in self.receivers}
        self.lease_ms = self.options.lease_ms or self.limits.lease_ms
        self.lease = Lease(store, self.lease_ms)
        self._am_refreshed: dict[str, int] = {}
        self._retention_due_at = 0
        # Receiver-level backoff: consecutive rounds without any success, and until when to wait.
        self._failing_rounds: dict[str, int] = {}
        self._paused_until: dict[str, int] = {}
        self._paused_by_receiver: dict[str, bool] = {}
        self._stats: Counter[str] = Counter()
        self._stats_lock = threading.Lock()

    def now_ms(self) -> int:
        """The notifier's clock (injectable, for tests of silences and ages) in epoch ms."""
        return int(self._clock() * 1000)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        self.sender.close()

    def _count(self, what: str, n: int = 1) -> None:
        with self._stats_lock:
            self._stats[what] += n

    @property
    def stats(self) -> Counter[str]:
        with self._stats_lock:
            return Counter(self._stats)

    # -- silences ----------------------------------------------------------------------------

    def _silence_verdicts(self, receiver: Receiver, rows: list[QueuedDelivery], now: int) -> dict[int, Verdict]:
        """delivery id -> what a silence makes of it, for the rows not simply sent now."""
        if not rows:
            return {}
        silences = active_silences(self.store, min(r.created_at for r in rows))
        firing_state = self.queue.firing_states(receiver.name, [r.alert_id for r in rows if r.status == "resolved"])
        resolved_at = self.queue.resolutions_recorded(
            [r.alert_id for r in rows if r.status != "resolved"] if silences else [])
        out: dict[int, Verdict] = {}
        for row in rows:
            alert = row.alert
            if isinstance(alert, NotAnAlert):
                continue  # no alert: its send fails for good
            if row.status == "resolved":
                state, silence_id, until = firing_state.get(row.alert_id, (None, None, None))
                if state is None and not silences:
                    continue
                verdict = resolution_verdict(alert, row.created_at, now, silences, state, silence_id, until)
            elif silences:
                verdict = firing_verdict(alert, row.created_at, now, silences, resolved_at.get(row.alert_id))
            else:
                continue
            if verdict.action != SEND:
                out[row.id] = verdict
        return out

    def _release_held(self, receiver: Receiver) -> None:
        """Decide again the firings held by silences that have ended: page what still fires."""
        now = self.now_ms()
        held = self.queue.held_due(receiver.name, now, self.options.batch_limit)
        if not held:
            return
        verdicts = self._silence_verdicts(receiver, held, now)
        released = [r for r in held if r.id not in verdicts]
        self.queue.settle_held([_state_change(r, verdicts[r.id]) for r in held
                                if r.id in verdicts and verdicts[r.id].action in (HOLD, SILENCE)], released, now)
        for row in released:
            log.info("silence ended and the alert still fires: sending it", extra={
                "receiver": receiver.name, "alert_id": row.alert_id, "status": row.status})
        for row in held:
            if row.id in verdicts and verdicts[row.id].action == SILENCE:
                log.info("silence ended after the alert resolved: not sent", extra={
                    "receiver": receiver.name, "alert_id": row.alert_id, "silence_id": verdicts[row.id].silence_id})

    def _record_verdicts(self, receiver: Receiver, rows: list[QueuedDelivery], verdicts: Mapping[int, Verdict]) -> None:
        self.queue.change_pending([_state_change(r, verdicts[r.id]) for r in rows
                                   if verdicts[r.id].action in (HOLD, SILENCE)], self.now_ms())
        for row in rows:
            verdict = verdicts[row.id]
            if verdict.action in (HOLD, SILENCE):
                self._count("silenced")
                log.info("held by a silence" if verdict.action == HOLD else "silenced",
                         extra={"receiver": receiver.name, "alert_id": row.alert_id, "status": row.status,
                                "silence_id": verdict.silence_id})

    # -- sending -----------------------------------------------------------------------------

    def _units(self, receiver: Receiver, rows: list[QueuedDelivery], alerts: Mapping[int, OutgoingAlert | NotAnAlert]
               ) -> list[tuple[IncidentNotice | None, list[QueuedDelivery]]]:
        """(what it tells of a fleet incident or None, the deliveries sent as one request)."""
        units, rows = self.incidents.units(receiver, rows, alerts)
        if not receiver.accepts_groups:
            return units + [(None, [r]) for r in rows]
        size = GROUP_LIMIT.get(receiver.kind, 100)
        groups: dict[str, list[QueuedDelivery]] = {}
        for row in rows:
            groups.setdefault(row.group_key, []).append(row)
        return units + [(None, group[i:i + size]) for group in groups.values() for i in range(0, len(group), size)]

    def _deliver(self, receiver: Receiver, incident: IncidentNotice | None, unit: list[QueuedDelivery],
                 alerts: Mapping[int, OutgoingAlert | NotAnAlert]) -> Outcome:
        items = [alerts[r.id] for r in unit]
        request, why = None, next((item.why for item in items if isinstance(item, NotAnAlert)), None)
        if why is None:
            try:
                request = (receiver.request(items, self.now_ms()) if incident is None
                           else receiver.incident_request(incident, items, self.now_ms()))
            except (ValueError, KeyError, TypeError) as exc:
                why = f"{type(exc).__name__}: {exc}"
        if request is None:
            outcome = Outcome(False, permanent=True, error=f"cannot build the message: {why}")
        else:
            # Units wait in the receiver's pool: the lease is judged when each attempt starts.
            if not self.lease.held_for(self.attempt_s):
                return NOT_SENT
            outcome = self.sender.send(receiver, request)
        self._record(receiver, unit, outcome, incident)
        return outcome

    def _record(self, receiver: Receiver, unit: list[QueuedDelivery], outcome: Outcome,
                about: IncidentNotice | None) -> None:
        now = self.now_ms()
        info = {"receiver": receiver.name, "alert_ids": [r.alert_id for r in unit[:20]],
                "statuses": sorted({r.status for r in unit}), "messages": len(unit),
                "attempt": max(r.attempts for r in unit) + 1}
        given_up: dict[int, str] = {}
        if not outcome.ok and not outcome.permanent:
            for r in unit:
                reason = dead_letter_reason(r.attempts + 1, r.planned_at, now, self.limits, outcome.error or "")
                if reason is not None:
                    given_up[r.id] = reason
        retry_at = {} if outcome.ok or outcome.permanent else {
            r.id: now + self.sender.backoff_ms(r.attempts + 1, outcome.retry_after_ms)
            for r in unit if r.id not in given_up}
        outbox_error = None
        if not outcome.ok:
            prefix = "dead letter: " if outcome.permanent or given_up else ""
            outbox_error = f"{prefix}{receiver.name}: {next(iter(given_up.values()), outcome.error)}"
        if not self.queue.record_outcome(unit, now, delivered=outcome.ok, permanent=outcome.permanent,
                                         error=outcome.error, retry_at=retry_at, given_up=given_up,
                                         outbox_error=outbox_error, fence=self.lease.fence, incident=tag_of(about)):
            self._count("fenced", len(unit))
            log.warning("the notifier lease was taken over during this send: its outcome is not recorded "
                        "(the new holder sends it again)", extra={**info, "ok": outcome.ok})
            return
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

    # -- upkeep ------------------------------------------------------------------------------

    def sweep(self) -> None:
        """Close outbox rows whose deliveries are all done (catches races between receiver threads);
        dead-letter deliveries to receivers no longer configured; apply retention when it is due."""
        now = self.now_ms()
        gone = self.queue.sweep(list(self.receivers), now)
        if gone:
            log.warning("dead-lettered deliveries to receivers no longer configured", extra={"deliveries": gone})
        if now >= self._retention_due_at:
            self.apply_retention()

    def apply_retention(self) -> None:
        """Delete what is older than `alerting.delivery.retention_days` (a bounded amount per call)."""
        now = self.now_ms()
        counts = delete_expired_notifications(self.store, now - self.limits.retention_days * 86_400_000,
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
        requeued, superseded = self.queue.requeue_dead(list(self.receivers), self.now_ms())
        log.info("dead letters requeued", extra={"requeued": requeued, "superseded": superseded})
        return Counter(requeued=requeued, superseded=superseded)

    # -- one receiver's pass -----------------------------------------------------------------

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
            due = self.queue.due(name, now, limit, grouped=receiver.accepts_groups, fresh_only=fresh_only)
            rows = [r for r in due if r.id not in attempted]
            if not rows:
                break
            attempted.update(r.id for r in rows)
            alerts = self.incidents.tagged(receiver, rows, _outgoing(rows))
            verdicts = self._silence_verdicts(receiver, rows, now)
            if verdicts:
                self._record_verdicts(receiver, [r for r in rows if r.id in verdicts], verdicts)
                rows = [r for r in rows if r.id not in verdicts]
            futures = [self._pools[name].submit(self._deliver, receiver, incident, unit, alerts)
                       for incident, unit in self._units(receiver, rows, alerts)]
            wait_futures(futures)
            results = [future.result() for future in futures]
            outcomes = [o for o in results if o.sent]
            if outcomes and not any(o.ok or o.permanent for o in outcomes):
                if fresh_only:
                    return  # still failing: the pause stands
                # Nothing got through: the receiver is down or overloaded. Back off as a whole.
                rounds = self._failing_rounds.get(name, 0) + 1
                self._failing_rounds[name] = rounds
                asked = max((o.retry_after_ms or 0) for o in outcomes) or None
                pause = self.sender.backoff_ms(rounds, asked)
                self._paused_until[name] = self.now_ms() + pause
                self._paused_by_receiver[name] = asked is not None
                log.warning("receiver is failing; pausing it", extra={"receiver": name, "rounds": rounds,
                                                                      "pause_ms": pause})
                return
            if any(o.ok for o in outcomes):
                self._failing_rounds.pop(name, None)
                self._paused_until.pop(name, None)
                fresh_only = False
            if len(outcomes) < len(results):
                break  # the lease would not cover an attempt: nothing more until it is renewed
        if receiver.kind == "alertmanager" and self.lease.held:
            self._refresh_alertmanager(receiver)

    def _refresh_alertmanager(self, receiver: Receiver) -> None:
        """Re-send open firing alerts so that Alertmanager does not time them out (like Prometheus)."""
        now = self.now_ms()
        if now - self._am_refreshed.setdefault(receiver.name, now) < self.options.alertmanager_refresh_ms:
            return
        self._am_refreshed[receiver.name] = now
        bodies = self.incidents.open_firings(receiver.name)  # each with the labels it fired with
        size = GROUP_LIMIT["alertmanager"]
        for start in range(0, len(bodies), size):
            items = bodies[start:start + size]
            outcome = self.sender.send(receiver, receiver.request(items, now))
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
            if stop.wait(min(interval * 5, self.lease_ms / 1000)):
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
                self._try(self.planner.plan, default=0)
                for name, worker in workers.items():
                    future = running.get(name)
                    if future is None or future.done():
                        if future is not None:
                            self._try(future.result, default=None, broad=True)
                        running[name] = worker.submit(self.run_receiver_pass, name, stop)
                if once:
                    pending = set(running.values())
                    while pending:
                        _, pending = wait_futures(pending, timeout=max(1.0, self.lease_ms / 3000))
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
