"""Alert records (SPEC section 4) and the bookkeeping of open incidents."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = [
    "ALERT_SCHEMA",
    "RULES",
    "Alert",
    "Emitter",
    "Incidents",
    "alert_id",
]

ALERT_SCHEMA = "fleetwatch.alert/v1"

# rule -> (severity, subject kind)
RULES: dict[str, tuple[str, str]] = {
    "broker.heartbeat_lost": ("critical", "broker"),
    "broker.fenced": ("warning", "broker"),
    "broker.partitioned": ("critical", "broker"),
    "broker.stuck_stopping": ("warning", "broker"),
    "broker.epoch_regression": ("critical", "broker"),
    "broker.flapping": ("warning", "broker"),
    "broker.illegal_transition": ("info", "broker"),
    "cluster.no_controller": ("critical", "cluster"),
    "cluster.controller_flapping": ("warning", "cluster"),
    "cluster.controller_disagreement": ("warning", "cluster"),
    "cluster.id_changed": ("critical", "target"),
    "cluster.id_duplicate": ("critical", "cluster"),
    "cluster.id_invalid": ("warning", "target"),
    "cluster.unreachable": ("critical", "target"),
    "connection.misrouted": ("critical", "endpoint"),
    "endpoint.collision": ("critical", "endpoint"),
}

# Alerts fired while applying an event sort before alerts fired by a timer at the same time.
EVENT_PHASE, TIMER_PHASE = 0, 1


def alert_id(rule: str, subject: str, starts_at: int) -> str:
    """Stable for one incident, so receivers can deduplicate (SPEC section 4)."""
    return hashlib.sha256(f"{rule}|{subject}|{starts_at}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Alert:
    rule: str
    status: str
    subject: str
    cluster_id: str | None
    target: str | None
    broker_id: int | None
    endpoint: str | None
    starts_at: int
    ends_at: int | None
    summary: str
    details: dict[str, Any]
    # (phase, position of the event that caused it): breaks ties between equal event times.
    cause: tuple[int, tuple[Any, ...]] = (TIMER_PHASE, ())

    @property
    def severity(self) -> str:
        return RULES[self.rule][0]

    @property
    def event_ms(self) -> int:
        return self.ends_at if self.status == "resolved" and self.ends_at is not None else self.starts_at

    def sort_key(self) -> tuple[Any, ...]:
        phase, position = self.cause
        return (self.event_ms, phase, position, self.rule, self.subject, self.status == "resolved")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": ALERT_SCHEMA,
            "alert_id": alert_id(self.rule, self.subject, self.starts_at),
            "rule": self.rule,
            "status": self.status,
            "severity": self.severity,
            "cluster_id": self.cluster_id,
            "target": self.target,
            "broker_id": self.broker_id,
            "endpoint": self.endpoint,
            "starts_at": self.starts_at,
            "ends_at": self.ends_at,
            "summary": self.summary,
            "details": self.details,
        }


@dataclass(slots=True)
class Emitter:
    """Collects the alerts of one processing step, stamped with what caused them."""

    alerts: list[Alert] = field(default_factory=list)
    cause: tuple[int, tuple[Any, ...]] = (TIMER_PHASE, ())

    def emit(self, alert: Alert) -> None:
        self.alerts.append(replace(alert, cause=self.cause))


class Incidents:
    """The open (firing) alerts of one shard, keyed by (rule, subject)."""

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], Alert] = {}

    def is_firing(self, rule: str, subject: str) -> bool:
        return (rule, subject) in self.open

    def started(self, rule: str, subject: str) -> int | None:
        alert = self.open.get((rule, subject))
        return alert.starts_at if alert else None

    def fire(self, out: Emitter, rule: str, subject: str, at: int, summary: str, *,
             cluster_id: str | None = None, target: str | None = None, broker_id: int | None = None,
             endpoint: str | None = None, details: dict[str, Any] | None = None) -> None:
        if (rule, subject) in self.open:
            return
        alert = Alert(rule=rule, status="firing", subject=subject, cluster_id=cluster_id, target=target,
                      broker_id=broker_id, endpoint=endpoint, starts_at=at, ends_at=None,
                      summary=summary, details=details or {})
        self.open[(rule, subject)] = alert
        out.emit(alert)

    def resolve(self, out: Emitter, rule: str, subject: str, at: int) -> None:
        alert = self.open.pop((rule, subject), None)
        if alert is not None:
            out.emit(replace(alert, status="resolved", ends_at=max(at, alert.starts_at)))
