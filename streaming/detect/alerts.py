"""Detection's bookkeeping of alerts: the open incidents of a shard, and what one step emitted.

The alert record itself, its rules and its wire format are `streaming.records.alert`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from streaming.detect.naming import NO_NAMES, AlertNames, named_summary
from streaming.records.alert import TIMER_PHASE, Alert

__all__ = ["Emitter", "Incidents"]


@dataclass(slots=True)
class Emitter:
    """Collects the alerts of one processing step, stamped with what caused them."""

    alerts: list[Alert] = field(default_factory=list)
    cause: tuple[int, tuple[Any, ...]] = (TIMER_PHASE, ())

    def emit(self, alert: Alert) -> None:
        self.alerts.append(replace(alert, cause=self.cause))


class Incidents:
    """The open (firing) alerts of one shard, keyed by (rule, subject)."""

    # Set by a cluster's shard (engine.py): a broker incident's blast radius at the moment it fires,
    # put in its details as `impact` (partitions.py). Derived from the shard, never pickled.
    impact: Callable[[int], dict[str, Any] | None] | None = None
    # Set by the engine: an alert's names as the shard knows them when it fires (rule, cluster id,
    # target, broker id -> naming.py). Derived from the shard, never pickled.
    names: Callable[[str, str | None, str | None, int | None], AlertNames] | None = None

    def __init__(self) -> None:
        self.open: dict[tuple[str, str], Alert] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("impact", "names")}

    def is_firing(self, rule: str, subject: str) -> bool:
        return (rule, subject) in self.open

    def started(self, rule: str, subject: str) -> int | None:
        alert = self.open.get((rule, subject))
        return alert.starts_at if alert else None

    def fire(self, out: Emitter, rule: str, subject: str, at: int, summary: str, *,
             cluster_id: str | None = None, target: str | None = None, broker_id: int | None = None,
             endpoint: str | None = None, source: str | None = None, details: dict[str, Any] | None = None) -> None:
        if (rule, subject) in self.open:
            return
        if broker_id is not None and self.impact is not None:
            impact = self.impact(broker_id)
            if impact is not None:
                details = {**(details or {}), "impact": impact}
        names = NO_NAMES if self.names is None else self.names(rule, cluster_id, target, broker_id)
        alert = Alert.firing(rule, subject, at, named_summary(summary, names, broker_id), cluster_id=cluster_id,
                             target=target, broker_id=broker_id, endpoint=endpoint, source=source, details=details,
                             cluster_name=names.cluster_name, tags=names.tags, broker_host=names.broker_host,
                             rack=names.rack)
        self.open[(rule, subject)] = alert
        out.emit(alert)

    def resolve(self, out: Emitter, rule: str, subject: str, at: int) -> None:
        alert = self.open.pop((rule, subject), None)
        if alert is not None:
            out.emit(alert.resolved_at(at))

    def resolve_every(self, out: Emitter, at: int, reason: str) -> None:
        """Resolve every open alert at `at`, saying why (`details.reason`): their subject left."""
        for key in sorted(self.open):
            out.emit(self.open.pop(key).resolved_at(at, reason=reason))
