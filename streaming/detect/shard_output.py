"""What a shard of either pass produces in one step (`ShardOutput`), and what both kinds of shard
share (`Forgettable`); split from engine.py, which re-exports them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streaming.config import RuleBook
from streaming.detect.alerts import Incidents
from streaming.detect.identity import IdChange
from streaming.detect.misroutes import AddressChange
from streaming.detect.observers import CollectorSilence
from streaming.records.alert import Alert
from streaming.records.contract import Event

__all__ = ["Forgettable", "Handoff", "Position", "ShardOutput"]

# What the first pass hands on to the second.
Handoff = AddressChange | IdChange | CollectorSilence

# Where an event sits in its input: (source, offset) or ("", line). Orders equal timestamps.
Position = tuple[Any, ...]


@dataclass
class ShardOutput:
    """What one processing step of a shard produced: for the sinks, alerts, late events and the
    rows of the state store's tables; for the second pass, the first pass's hand-offs."""

    alerts: list[Alert] = field(default_factory=list)
    late: list[tuple[Position, Event]] = field(default_factory=list)
    brokers: list[dict[str, Any]] = field(default_factory=list)
    clusters: list[dict[str, Any]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    transitions: list[dict[str, Any]] = field(default_factory=list)
    controller_changes: list[dict[str, Any]] = field(default_factory=list)
    handoffs: list[Handoff] = field(default_factory=list)


class Forgettable:
    """What a shard of either pass shares: once quiet for longer than the state TTL with nothing
    open, the job drops its state."""

    last_event_ms: int | None
    incidents: Incidents

    def _forget_at(self, book: RuleBook) -> int | None:
        # Kept while an alert of the shard is open (streaming/detect/forgetting.py).
        if self.last_event_ms is None or self.incidents.open:
            return None
        return self.last_event_ms + book.defaults.state_ttl_ms

    def release(self) -> None:
        """Cut what ties the shard's objects back to it, once it is stored or dropped (see `ShardEngine`'s)."""

    def forgotten(self, watermark: int, book: RuleBook) -> bool:
        """Quiet for longer than the state TTL with nothing open: the job drops the shard's state.
        (An event after that starts it anew, exactly as `process` starts a shard over.)"""
        forget_at = self._forget_at(book)
        return forget_at is not None and watermark > forget_at
