"""Alert lines and open incidents, and the timers of a subject: what every rule writes through."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from .defaults import SEVERITY

__all__ = ["TIMER", "Alerts", "Incidents", "advance", "seconds"]


# What caused an alert: (0, (ts, line)) for an event, (1, ()) for a timer. At equal event times,
# alerts fired by an event come first, then by the event's line (README "Alert fields").
TIMER = (1, ())


class Alerts:
    """Every alert line written, and the cause of whatever fires or resolves now."""

    def __init__(self) -> None:
        self.lines: list[tuple[tuple[Any, ...], dict[str, Any]]] = []  # (sort key, alert)
        self.cause: tuple[int, tuple[Any, ...]] = TIMER

    def write(self, alert: dict[str, Any], subject: str) -> None:
        at = alert["ends_at"] if alert["status"] == "resolved" else alert["starts_at"]
        phase, position = self.cause
        self.lines.append(((at, phase, position, alert["rule"], subject, alert["status"] == "resolved"), alert))

    def sorted(self) -> list[dict[str, Any]]:
        return [alert for _, alert in sorted(self.lines, key=lambda line: line[0])]


class Incidents:
    """The open alerts of one part of the state (a cluster, a target, the fleet): (rule, subject) -> alert."""

    def __init__(self, alerts: Alerts) -> None:
        self.alerts = alerts
        self.open: dict[tuple[str, str], dict[str, Any]] = {}
        # A cluster's: the blast radius a broker incident carries as `impact` (partitions.py).
        self.impact: Callable[[int], dict[str, Any] | None] | None = None
        # A cluster's: the target that last reported it, and a broker's address and rack as last seen.
        self.last_target: Callable[[], str | None] = lambda: None
        self.broker_place: Callable[[int], tuple[str | None, str | None]] = lambda broker_id: (None, None)

    def firing(self, rule: str, subject: str) -> bool:
        return (rule, subject) in self.open

    def fire(self, rule: str, subject: str, at: int, summary: str, *, cluster_id: str | None = None,
             target: str | None = None, broker_id: int | None = None, endpoint: str | None = None,
             collector: str | None = None, **details: Any) -> None:
        """`collector`: the alert's top-level `source` (a collector rule's subject; absent for the others)."""
        if (rule, subject) in self.open:
            return  # one incident at a time: the first firing line stands
        if broker_id is not None and self.impact is not None and (impact := self.impact(broker_id)) is not None:
            details = {**details, "impact": impact}
        # README "Alert fields": named by the alert's target, else the target that last reported the
        # cluster (no config here: no configured name, no tags).
        name = target or self.last_target()
        host, rack = self.broker_place(broker_id) if broker_id is not None else (None, None)
        place = ", ".join([*([host] if host else []), *([f"rack {rack}"] if rack else [])])
        if place:
            summary = summary.replace(f"broker {broker_id} ", f"broker {broker_id} ({place}) ", 1)
        if name:
            summary = f"{name}: {summary}"
        alert = {
            "schema": "fleetwatch.alert/v1",
            "alert_id": hashlib.sha256(f"{rule}|{subject}|{at}".encode()).hexdigest()[:32],
            "rule": rule, "status": "firing", "severity": SEVERITY[rule], "cluster_id": cluster_id,
            "target": target, "broker_id": broker_id, "endpoint": endpoint,
            **({} if collector is None else {"source": collector}),
            "starts_at": at, "ends_at": None, "summary": summary, "details": details,
            "cluster_name": name, "tags": {}, "broker_host": host, "rack": rack,
        }
        self.open[(rule, subject)] = alert
        self.alerts.write(alert, subject)

    def resolve(self, rule: str, subject: str, at: int, **details: Any) -> None:
        """`details`: added to the firing line's in the resolved line (a removed target's reason)."""
        alert = self.open.pop((rule, subject), None)
        if alert is not None:
            self.alerts.write({**alert, "status": "resolved", "ends_at": max(at, alert["starts_at"]),
                               "details": {**alert["details"], **details}}, subject)

    def resolve_all(self, at: int, **details: Any) -> None:
        for rule, subject in sorted(self.open):
            self.resolve(rule, subject, at, **details)


def seconds(ms: int) -> str:
    """A rule's window as a summary says it: whole minutes in minutes, else seconds."""
    return f"{ms // 60000} min" if ms >= 60000 and ms % 60000 == 0 else f"{ms / 1000:g} s"


def advance(deadlines: Callable[[], list[int]], on_time: Callable[[int], None], now: int,
            alerts: Alerts) -> None:
    """Fire, in time order, each deadline of a subject that fell due strictly before `now`."""
    cause, alerts.cause = alerts.cause, TIMER
    done = None
    while due := [t for t in deadlines() if t < now and (done is None or t > done)]:
        done = min(due)
        on_time(done)
    alerts.cause = cause
