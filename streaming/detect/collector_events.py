"""How a cluster's or a target's shard takes a collector's own events (issue 41; README.md, "Collectors:
rounds, gaps, leaving"): its rounds (`collector_round`) and the targets it watches (`collector_targets`).
`CollectorEvents` is a part of `ShardEngine` (engine.py), split out where its meaning splits."""

from __future__ import annotations

from streaming.config import RuleBook, RuleSettings
from streaming.detect.alerts import Emitter
from streaming.detect.observers import ClusterObservers
from streaming.detect.shard_output import Position, ShardOutput
from streaming.records.contract import UNREGISTERED, CollectorRound, CollectorTargets

__all__ = ["TARGET_PREFIX", "TARGET_REMOVED", "CollectorEvents"]

TARGET_PREFIX = "target:"
# Why a removed target's alerts resolve.
TARGET_REMOVED = "target removed"


class CollectorEvents:
    """The rounds and the targets of a collector, as `ShardEngine` applies them (its fields and methods:
    `self` is a ShardEngine)."""

    def _round(self, event: CollectorRound, position: Position, rules: RuleSettings, ttl: int,
               out: Emitter, timers: Emitter, result: ShardOutput, exact: frozenset[int] = frozenset()) -> set[int]:
        """A round of a collector that watches the cluster (observers.py): what fell due before it
        fires first; after more than a session that nobody watched, every broker's session restarts at
        it (blindness, not silence), but those of `exact`, whose last fetch the round (a quorum reading)
        showed; brokers missing from a whole set of registrations leave. The ids of the brokers it touched."""
        if self.observers is None:
            self.observers = ClusterObservers(self.cluster_id)
        observers = self.observers
        observers.advance_to(event.ts, rules, self.incidents, timers)
        self._advance_brokers(event.ts, rules, timers)
        before = observers.until
        observers.on_round(event, position)
        until = observers.until
        gap = before is not None and event.ts - before > rules.session_timeout_ms
        for broker_id, broker in self.brokers.items():
            if gap and broker_id not in exact:
                broker.restart_session(event.ts, self.incidents)
            broker.observe_until(until)
        self._advance_brokers(event.ts, rules, timers)
        if self.cluster is not None:
            self.cluster.in_rounds = True
            self.cluster.advance_to(event.ts, rules, self.incidents, timers)
        if event.registered is None:
            return set()
        gone = [b for b, broker in self.brokers.items() if b not in event.registered and broker.gone_at is None]
        for broker_id in gone:
            self.brokers[broker_id].leave(event.ts, self.incidents, out)
            result.transitions.append({"cluster_id": self.cluster_id, "broker_id": broker_id, "ts": event.ts,
                                       "state": "OFFLINE", "previous_state": None, "reason": UNREGISTERED})
        if gone:
            self._forget_listing()
            result.handoffs += self.advertisements.unregistered(self.cluster_id, gone, event.ts, ttl, position)
        return set(gone)

    def _watching(self, event: CollectorTargets, position: Position, book: RuleBook, out: Emitter,
                  result: ShardOutput) -> None:
        """`event.source` watches only `event.targets` from now on. A target it dropped, and the
        cluster it watched through it, that no other collector watches: what fell due before fires,
        then every open alert resolves (`TARGET_REMOVED`), what they hold at the second pass is
        handed back, and the shard is forgotten (README "Collectors: rounds, gaps, leaving")."""
        if self.shard.startswith(TARGET_PREFIX):
            name = self.shard.removeprefix(TARGET_PREFIX)
            if event.source not in self.watched_by or name in event.targets:
                return
            self.watched_by = self.watched_by - {event.source}
            if self.watched_by:
                return
            passed = self.advance(event.ts, book)
            released = self.held_id.released(name, event.ts, position)
        else:
            observers = self.observers
            if observers is None or not observers.drops(event.source, event.targets):
                return
            passed = self.advance(event.ts, book)
            observers.left(event.source, event.targets, event.ts, position)
            result.handoffs += observers.drain()
            if observers.rounds:
                result.alerts += passed.alerts
                result.handoffs += passed.handoffs
                return
            released = self.advertisements.unregistered(self.cluster_id, list(self.advertisements.by_node),
                                                        event.ts, book.defaults.state_ttl_ms, position)
        result.alerts += passed.alerts
        result.handoffs += passed.handoffs + released
        self.incidents.resolve_every(out, event.ts, f"{TARGET_REMOVED}: {event.source} no longer watches it")
        self.removed_at = event.ts
