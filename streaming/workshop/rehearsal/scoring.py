"""Scoring a rehearsal row from what a real HTTP receiver got and what the store holds.

A webhook request is one alert object, or a fleet incident notification (`fleetwatch.incident/v1`,
streaming/detect/README.md "Fleet incidents"): that one tells of its members, the alert objects
under `alerts` (each listed in `member_ids`; a member told earlier is in `member_ids` only), and
counts as an arrival of each of those objects.

- expected alerts seen: the row's expected (rule, subject)s whose firing *and* resolved
  notifications both reached the receiver during the row (the resolution with a given
  `details.reason`, when the row says how they must resolve: `target removed`). What a row expects
  is its fault's alerts, and those its disruption raises itself: `collector.silent` of a frozen
  probe, whose subject is the collector (`collector:<source>`);
- false positives: alerts (store or receiver) of the row whose (rule, subject) the row does not
  explain (neither expected nor allowed); the allowed ones that fired are listed too (`allowed_seen`);
- lost: (alert_id, status) pairs the store holds for the row's alerts (a resolved alert: its firing
  and its resolution) that never reached the receiver once the outbox was drained;
- duplicated: deliveries of one (alert_id, status) beyond the first (delivery is at least once,
  SPEC section 6: a receiver deduplicates; the rehearsal counts what it had to);
- recovery: seconds from the kill to the first expected firing notification at the receiver.

`catch_up` reads the store's progress rows of a job restarted onto a backlog: its micro-batches
until the first one the cap did not cut.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from streaming.notify import INCIDENT_SCHEMA
from streaming.store import Store, alerts, outbox, pipeline_progress, targets
from streaming.workshop.hooks import Hook
from streaming.workshop.rehearsal.targets import Fault, Subject, subject_of

__all__ = ["Arrival", "CatchUp", "RowScore", "all_delivered", "answered", "arrivals", "catch_up", "score_row",
           "still_open", "told"]


def answered(store: Store, target: str, since_ms: int | None = None) -> bool:
    """The job has stored a successful probe answer of `target` (one of `since_ms` or later, when given)."""
    with store.engine.connect() as conn:
        row = conn.execute(select(targets.c.last_ok_ms).where(targets.c.target == target)).first()
    return row is not None and row.last_ok_ms is not None and (since_ms is None or row.last_ok_ms >= since_ms)


def still_open(store: Store, subjects: frozenset[Subject]) -> list[Subject]:
    """Which of `subjects` have an alert firing in the store."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(alerts).where(alerts.c.status == "firing")).all()
    return sorted({subject_of(dict(row._mapping)) for row in rows} & subjects)


def all_delivered(store: Store) -> bool:
    with store.engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(outbox).where(outbox.c.delivered_at.is_(None))) == 0


@dataclass(frozen=True)
class Arrival:
    t: float  # monotonic
    alert: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return self.alert["alert_id"], self.alert["status"]

    @property
    def reason(self) -> str:
        """Why it resolved, when the alert says (`details.reason`): "" otherwise."""
        return str((self.alert.get("details") or {}).get("reason") or "")


def _told(t: float, body: dict[str, Any]) -> list[Arrival]:
    """The alerts one webhook request tells of: itself, or an incident notification's members."""
    if body.get("schema") != INCIDENT_SCHEMA:
        return [Arrival(t, body)]
    members = set(body["member_ids"])
    strangers = [a["alert_id"] for a in body["alerts"] if a["alert_id"] not in members]
    if strangers:  # the notifier's bug, not the scoring's: say it
        raise ValueError(f"incident {body['incident_id']} tells of alerts it does not list as members: {strangers}")
    return [Arrival(t, alert) for alert in body["alerts"]]


def arrivals(receiver: Hook, since: int = 0) -> list[Arrival]:
    """The alerts the receiver accepted, from its `since`-th request on (an incident notification
    is an arrival of each member it tells of)."""
    with receiver.lock:
        got = list(receiver.arrivals[since:])
    return [arrival for a in got for arrival in _told(a["t"], json.loads(a["body"]))]


def told(got: list[Arrival], status: str, resolved_by: str | None = None) -> set[Subject]:
    """The (rule, subject)s of the arrivals of `status`; resolved ones only with a `details.reason`
    that starts with `resolved_by`, when given."""
    return {subject_of(a.alert) for a in got if a.alert["status"] == status
            and (status != "resolved" or resolved_by is None or a.reason.startswith(resolved_by))}


@dataclass
class RowScore:
    name: str
    fault: str
    kill: str | None
    expected: int
    seen: int
    false_positives: list[str] = field(default_factory=list)
    allowed_seen: list[str] = field(default_factory=list)  # alerts the row allows (true, not required) that fired
    lost: list[str] = field(default_factory=list)
    duplicated: int = 0
    alert_s: float | None = None  # fault opened -> first expected firing at the receiver
    recover_s: float | None = None  # kill -> first expected firing at the receiver
    failure: str | None = None  # what went wrong, in one line (a timeout, a crash)
    note: str | None = None  # what the row measured besides (a catch-up's micro-batches)

    @property
    def ok(self) -> bool:
        return (self.failure is None and self.seen == self.expected and not self.false_positives
                and not self.lost and not self.duplicated)


def _store_alerts(store: Store, since_ms: float) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(alerts).where(alerts.c.recorded_at >= since_ms)).all()
    return [dict(r._mapping) for r in rows]


def score_row(name: str, fault: Fault, kill: str | None, *, store: Store, receiver: Hook, since: int,
              since_ms: float, opened: float, killed: float | None, failure: str | None,
              resolved_by: str | None = None, note: str | None = None) -> RowScore:
    """Score the row whose receiver arrivals begin at index `since` and whose alerts were recorded
    from `since_ms` (wall clock); `opened`/`killed` are monotonic. `fault`: what the row expects and
    allows (the fault's, and its disruption's); `resolved_by`: the start of the `details.reason` its
    expected alerts must resolve with."""
    got = arrivals(receiver, since)
    every = Counter(a.key for a in arrivals(receiver))
    explained = fault.expected | fault.allowed
    stored = _store_alerts(store, since_ms)
    row_alerts = {a["alert_id"]: a for a in stored} | {a.alert["alert_id"]: a.alert for a in got}
    false_positives = sorted({subject_of(a) for a in row_alerts.values() if subject_of(a) not in explained})
    allowed_seen = sorted({subject_of(a) for a in row_alerts.values()
                           if subject_of(a) in fault.allowed and subject_of(a) not in fault.expected})
    firing = {subject_of(a.alert): a.t for a in reversed(got) if a.alert["status"] == "firing"}
    resolved = told(got, "resolved", resolved_by)
    seen = {s for s in fault.expected if s in firing and s in resolved}
    wanted = {(a["alert_id"], "firing") for a in stored} | {(a["alert_id"], "resolved") for a in stored
                                                             if a["status"] == "resolved"}
    lost = sorted(f"{row_alerts[i]['rule']} {s}" for i, s in wanted if not every[(i, s)])
    first = min((firing[s] for s in fault.expected if s in firing), default=None)
    return RowScore(
        name=name, fault=fault.name, kill=kill, expected=len(fault.expected), seen=len(seen),
        false_positives=false_positives, allowed_seen=allowed_seen, lost=lost,
        duplicated=sum(n - 1 for key, n in every.items() if key[0] in row_alerts),
        alert_s=None if first is None else round(first - opened, 1),
        recover_s=None if first is None or killed is None else round(first - killed, 1),
        failure=failure, note=note)


@dataclass(frozen=True)
class CatchUp:
    """A restarted job's micro-batches: those the killed driver had planned (`rerun`, run again from its
    checkpoint), then the ones that read the backlog, until the first one its cap did not cut (`done`:
    there was one); `seconds`: from the start to the end of that one."""

    cap: int
    rerun: int
    batches: int
    capped: int
    records: int
    seconds: float | None
    done: bool

    def __str__(self) -> str:
        took = f"caught up in {self.seconds:.0f} s" if self.seconds is not None else "not caught up"
        return (f"catch-up: {self.rerun} micro-batch(es) planned before the kill run again, then {self.records:,} "
                f"records in {self.batches} micro-batches, {self.capped} cut by the cap of {self.cap:,}; {took}")


def catch_up(store: Store, started_ms: int, planned: int | None, cap: int, partitions: int) -> CatchUp:
    """The micro-batches (the store's progress rows) of a job started at `started_ms` (wall clock) onto a
    backlog, whose killed driver had planned the batches up to `planned`: those first, then the ones
    until the first that read fewer records than the cap less three per partition, which read
    everything (streaming/detect/README.md, "Resuming": a share rounds down by less than a record, a
    transaction marker at either end of a range reads two fewer)."""
    with store.engine.connect() as conn:
        rows = conn.execute(select(pipeline_progress.c.batch_id, pipeline_progress.c.input_rows,
                                   pipeline_progress.c.recorded_at)
                            .where(pipeline_progress.c.recorded_at >= started_ms)
                            .order_by(pipeline_progress.c.id)).all()
    rerun = [row for row in rows if planned is not None and row.batch_id <= planned]
    rows = rows[len(rerun):]
    cut = cap - 3 * partitions
    last = next((i for i, row in enumerate(rows) if row.input_rows < cut), None)
    batches = rows if last is None else rows[:last + 1]
    return CatchUp(cap=cap, rerun=len(rerun), batches=len(batches),
                   capped=sum(row.input_rows >= cut for row in batches),
                   records=sum(row.input_rows for row in batches),
                   seconds=None if last is None else round((rows[last].recorded_at - started_ms) / 1000, 1),
                   done=last is not None)


def now_ms() -> float:
    return time.time() * 1000
