"""Scoring a rehearsal row from what a real HTTP receiver got and what the store holds.

A webhook request is one alert object, or a fleet incident notification (`fleetwatch.incident/v1`,
streaming/detect/README.md "Fleet incidents"): that one tells of its members, the alert objects
under `alerts` (each listed in `member_ids`; a member told earlier is in `member_ids` only), and
counts as an arrival of each of those objects.

- expected alerts seen: the fault's expected (rule, subject)s whose firing *and* resolved
  notifications both reached the receiver during the row;
- false positives: alerts (store or receiver) of the row whose (rule, subject) the open fault
  does not explain (neither expected nor allowed);
- lost: (alert_id, status) pairs the store holds for the row's alerts (a resolved alert: its firing
  and its resolution) that never reached the receiver once the outbox was drained;
- duplicated: deliveries of one (alert_id, status) beyond the first (delivery is at least once,
  SPEC section 6: a receiver deduplicates; the rehearsal counts what it had to);
- recovery: seconds from the kill to the first expected firing notification at the receiver.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select

from streaming.notify.receivers import INCIDENT_SCHEMA
from streaming.store import Store, alerts, outbox, targets
from support.notify import Hook
from support.rehearsal.targets import Fault, subject_of

__all__ = ["Arrival", "RowScore", "all_delivered", "answered", "arrivals", "score_row"]


def answered(store: Store, target: str) -> bool:
    """The job has stored a successful probe answer of `target`."""
    with store.engine.connect() as conn:
        row = conn.execute(select(targets.c.last_ok_ms).where(targets.c.target == target)).first()
    return row is not None and row.last_ok_ms is not None


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


@dataclass
class RowScore:
    name: str
    fault: str
    kill: str | None
    expected: int
    seen: int
    false_positives: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    duplicated: int = 0
    alert_s: float | None = None  # fault opened -> first expected firing at the receiver
    recover_s: float | None = None  # kill -> first expected firing at the receiver
    failure: str | None = None  # what went wrong, in one line (a timeout, a crash)

    @property
    def ok(self) -> bool:
        return (self.failure is None and self.seen == self.expected and not self.false_positives
                and not self.lost and not self.duplicated)


def _store_alerts(store: Store, since_ms: float) -> list[dict[str, Any]]:
    with store.engine.connect() as conn:
        rows = conn.execute(select(alerts).where(alerts.c.recorded_at >= since_ms)).all()
    return [dict(r._mapping) for r in rows]


def score_row(name: str, fault: Fault, kill: str | None, *, store: Store, receiver: Hook, since: int,
              since_ms: float, opened: float, killed: float | None, failure: str | None) -> RowScore:
    """Score the row whose receiver arrivals begin at index `since` and whose alerts were recorded
    from `since_ms` (wall clock); `opened`/`killed` are monotonic."""
    got = arrivals(receiver, since)
    every = Counter(a.key for a in arrivals(receiver))
    explained = fault.expected | fault.allowed
    stored = _store_alerts(store, since_ms)
    row_alerts = {a["alert_id"]: a for a in stored} | {a.alert["alert_id"]: a.alert for a in got}
    false_positives = sorted({subject_of(a) for a in row_alerts.values() if subject_of(a) not in explained})
    firing = {subject_of(a.alert): a.t for a in reversed(got) if a.alert["status"] == "firing"}
    resolved = {subject_of(a.alert) for a in got if a.alert["status"] == "resolved"}
    seen = {s for s in fault.expected if s in firing and s in resolved}
    wanted = {(a["alert_id"], "firing") for a in stored} | {(a["alert_id"], "resolved") for a in stored
                                                             if a["status"] == "resolved"}
    lost = sorted(f"{row_alerts[i]['rule']} {s}" for i, s in wanted if not every[(i, s)])
    first = min((firing[s] for s in fault.expected if s in firing), default=None)
    return RowScore(
        name=name, fault=fault.name, kill=kill, expected=len(fault.expected), seen=len(seen),
        false_positives=false_positives, lost=lost,
        duplicated=sum(n - 1 for key, n in every.items() if key[0] in row_alerts),
        alert_s=None if first is None else round(first - opened, 1),
        recover_s=None if first is None or killed is None else round(first - killed, 1),
        failure=failure)


def now_ms() -> float:
    return time.time() * 1000
