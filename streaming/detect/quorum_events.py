"""How a cluster's shard takes a collector's quorum reading (issue 44; README.md, "Contract additions" and
"Broker rules", `broker.stalled`), and a controller reported by a response or a reading.

A reading at `ts` says, for each broker it saw, how old its last fetch from the active controller is and
whether it is fenced. It is applied as four things, in this order:
1. each fetch less than a session old and after the broker's last heartbeat is a heartbeat at its own
   time (`ts` minus its age): the probe's DescribeQuorum heartbeats are the same fetches;
2. the controller it names, as a response's (a new term is a takeover; a hold ends);
3. a round of its collector (observers.py): every deadline up to `ts` falls due, the reading shows what
   came by then;
4. each broker's age and registration (BrokerTracker.on_reading): `broker.stalled`, a fenced broker's
   lost session, a controlled shutdown.
`QuorumEvents` is a part of `ShardEngine` (engine.py), split out where its meaning splits.
"""

from __future__ import annotations

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter
from streaming.detect.shard_output import Position, ShardOutput
from streaming.records.contract import CollectorRound, QuorumReading

__all__ = ["QuorumEvents"]


class QuorumEvents:
    """A quorum reading and a controller's report, as `ShardEngine` applies them (its fields and methods:
    `self` is a ShardEngine)."""

    def _reading(self, event: QuorumReading, position: Position, rules: RuleSettings, ttl: int,
                 out: Emitter, timers: Emitter, result: ShardOutput) -> set[int]:
        """Apply one reading (the module's four steps); the ids of the brokers it touched."""
        inc = self.incidents
        self._controller().advance_to(event.ts, rules, inc, timers)
        if position[0] not in self.heartbeat_sources:
            self.heartbeat_sources = self.heartbeat_sources | {position[0]}
        fetched = sorted((event.ts - age, node) for node, age, _ in event.fetches
                         if age is not None and age < rules.session_timeout_ms)
        for at, node in fetched:
            known = self.brokers.get(node)
            if known is not None and known.last_hb is not None and at <= known.last_hb:
                continue
            self._broker(node, at, rules, ttl, timers).on_fetch(at, rules, inc, out)
        if event.target != self.cluster.target:
            # Another target reports the cluster from now on: what fell due before carries the last one's name.
            self._advance_brokers(event.ts, rules, timers)
            self.cluster.target = event.target
        held = self.cluster.none_since is not None
        takeover = self.cluster.report(event.ts, event.controller_id if event.controller_id >= 0 else None,
                                       event.controller_epoch, inc, out)
        self._controller_moment(event.ts, takeover, held, rules, ttl, timers)
        exact = frozenset(node for node, age, _ in event.fetches if age is not None)
        self._round(CollectorRound(event.ts, event.source, event.cluster_id, event.target, None), position, rules,
                    ttl, out, timers, result, exact)
        touched = set()
        for node, age, fenced in event.fetches:
            broker = self._broker(node, event.ts, rules, ttl, timers)
            broker.on_reading(event.ts, age, fenced, rules, inc, out)
            broker.updated_ms = max(broker.updated_ms, event.ts)
            result.handoffs += self.advertisements.heard(self.cluster_id, node, event.ts, ttl, position)
            touched.add(node)
        return touched

    def _controller_moment(self, ts: int, takeover: bool, held: bool, rules: RuleSettings, ttl: int,
                           timers: Emitter) -> None:
        """After a controller was reported at `ts` (`held`: whether the cluster reported none before): a
        takeover starts every broker's session afresh; the first report of no controller holds them; the
        controller named again releases them (a deadline the hold kept back falls due at its own time)."""
        holds = self.cluster is not None and self.cluster.none_since is not None
        if not takeover and held == holds:
            return
        inc = self.incidents
        for broker_id, broker in list(self.brokers.items()):
            # What fell due before this moment fires first (held deadlines stay held).
            broker.advance_to(ts, rules, inc, timers)
            if broker.forgettable(ts, ttl, rules, inc):
                del self.brokers[broker_id]  # as if its last event had dropped it: it starts over
                self._forget_listing()
                continue
            if holds:
                # No active controller reported: nobody holds the brokers' sessions.
                broker.hold_session(ts)
                continue
            broker.release_session()
            if takeover:
                # A new active controller: Kafka's starts every broker's session afresh.
                broker.on_new_controller(ts, inc)
            else:
                broker.advance_to(ts, rules, inc, timers)  # the held deadline stands
