"""The first pass's engine: the rules of one cluster's or one target's shard, in event time.

A shard holds everything one group of rules needs to see together, keyed by what the rules
are about (routing.py sends each event to its shards). The first pass's shards:
- `cluster:<cluster_id>`: broker and controller rules of one cluster (heartbeats, broker states,
  the cluster's successful responses), what the cluster advertises, and who watches it in rounds;
- `target:<name>`: the target rules (id changed, invalid, unreachable) and the misroutes of the
  endpoints probed for that target (all responses of the target), and the id the target holds.
They hand on the changes of what a cluster advertises, of the id a target holds, and of the
clusters a collector no longer observes (`ShardOutput.handoffs`) to the shards of the second pass
(holder_shard.py), the rules that compare clusters, targets and collectors with each other.

`ShardEngine` is plain, picklable Python: the Spark job keeps one per shard in its state store (in
the format of state_format.py), and `in_batches.detect()` runs the same engines over a list of events
for tests and benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from streaming.config import RuleBook, RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.brokers import HEARTBEAT_LOST, BrokerTracker
from streaming.detect.bus_gaps import BusGap
from streaming.detect.collector_events import TARGET_PREFIX, CollectorEvents
from streaming.detect.controller import ClusterTracker
from streaming.detect.holder_shard import HolderShard  # noqa: F401 (the states stored before: see below)
from streaming.detect.identity import HeldId, TargetTracker
from streaming.detect.misroutes import Advertisements, check_misrouted
from streaming.detect.naming import NO_CONFIG, AlertNames, alert_names
from streaming.detect.observers import ClusterObservers
from streaming.detect.partitions import LayoutTracker
from streaming.detect.quorum_events import QuorumEvents
from streaming.detect.shard_output import Forgettable, Position, ShardOutput
from streaming.detect.tracker import Tracker
from streaming.records.alert import EVENT_PHASE, TIMER_PHASE
from streaming.records.contract import (
    UNREGISTERED,
    Broker,
    BrokerHeartbeat,
    BrokerState,
    CollectorRound,
    CollectorTargets,
    Event,
    MetadataResponse,
    PartitionLayout,
    QuorumReading,
)

__all__ = ["CLUSTER_PREFIX", "TARGET_PREFIX", "ShardEngine"]
# `HolderShard` lived here until issue 41: the states stored before name `streaming.detect.engine.HolderShard`,
# and pickle finds it by that name.

CLUSTER_PREFIX = "cluster:"

_DEFAULT_TTL_MS = RuleSettings().state_ttl_ms


class ShardEngine(CollectorEvents, QuorumEvents, Forgettable):
    # The cluster's partition layout (issue 30). A class default: a state pickled before it has none.
    layout: LayoutTracker | None = None
    # The bus partitions ("topic:partition") the shard's heartbeats were read from: a gap in one of
    # them restarts its brokers' sessions (`BusGap`). A class default: a state pickled before it
    # reads none, and learns them from its next heartbeats.
    heartbeat_sources: frozenset[str] = frozenset()
    # Who watches the cluster in rounds (observers.py); of a target's shard, the sources of its
    # responses; when the shard's subject left every collector's targets. Class defaults: a state
    # pickled before has none.
    observers: ClusterObservers | None = None
    watched_by: frozenset[str] = frozenset()
    removed_at: int | None = None

    def __init__(self, shard: str) -> None:
        self.shard = shard
        self._start()
        self._derive()

    def _start(self) -> None:
        """The state of a shard that has seen nothing yet."""
        self.last_event_ms: int | None = None
        self.incidents = Incidents()
        self.brokers: dict[int, BrokerTracker] = {}
        self.cluster: ClusterTracker | None = None
        self.targets: dict[str, TargetTracker] = {}
        self.advertisements = Advertisements()  # of a cluster's shard
        self.held_id = HeldId()  # of a target's shard
        self.heartbeat_sources = frozenset()
        self.layout = None
        self.observers = None
        self.watched_by = frozenset()
        self.removed_at = None

    def _derive(self) -> None:
        """What the engine keeps beside its state: computed from it, not pickled."""
        self.cluster_id = self.shard.removeprefix(CLUSTER_PREFIX)
        self.incidents.impact = self._impact
        self.incidents.names = self._names
        self._book = getattr(self, "_book", NO_CONFIG)  # the book's, from the next `advance` on
        self._ttl_ms = _DEFAULT_TTL_MS  # the book's, from the next `advance` on
        for tracker in self.brokers.values():
            tracker.replaced = self._replaced
        self._forget_listing()

    def release(self) -> None:
        # `_derive`'s bound methods tie the trackers and the incidents back to the engine: a loaded
        # engine is a reference cycle (~100 objects at 12 brokers) that only Python's cycle collector
        # would free, a thousand of them per micro-batch at 1,000 clusters. Once cut, reference
        # counting frees the engine as soon as its bucket lets go of it.
        self.incidents.impact = self.incidents.names = None
        for tracker in self.brokers.values():
            tracker.replaced = None

    def _forget_listing(self) -> None:
        # The broker list of this cluster's last response, kept while listing it again would change
        # nothing but the time: its entries carry no fenced flag, and no heartbeat has changed a
        # listed broker's rack since (rack and address are all else an entry sets, and the address
        # only once). Nearly every response repeats its cluster's list. A cache: not pickled.
        self._listing: tuple[Broker, ...] | None = None
        self._listing_trackers: list[BrokerTracker] = []
        self._listing_ids: frozenset[int] = frozenset()
        self._listing_ms = 0  # when a response last listed them: each was heard of since

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("cluster_id", "_ttl_ms", "_book") and not k.startswith("_listing")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Older layouts are brought up to date by streaming/detect/state_format.py.
        self.__dict__.update(state)
        self._derive()

    def _impact(self, broker_id: int) -> dict[str, Any] | None:
        """The blast radius of a broker incident firing now (partitions.py)."""
        return None if self.layout is None else self.layout.impact(broker_id)

    def _names(self, rule: str, cluster_id: str | None, target: str | None, broker_id: int | None) -> AlertNames:
        """An alert's names as the shard knows them when it fires (naming.py)."""
        broker = None if broker_id is None else self.brokers.get(broker_id)
        return alert_names(self._book, rule, cluster_id, target, self.cluster.target if self.cluster else None,
                           broker.host if broker else None, broker.rack if broker else None)

    def _rules(self, book: RuleBook) -> RuleSettings:
        """The settings of this shard's cluster (of a target's shard: the global ones)."""
        return book.for_cluster(self.cluster_id, self.cluster.target if self.cluster else None)

    # -- time -------------------------------------------------------------------------------

    def next_deadline(self, book: RuleBook) -> int | None:
        """The earliest moment at which this shard must wake up with no new event: a rule's
        deadline, or the moment it has been quiet for longer than the state TTL."""
        due = self._rule_deadline(book)
        forget_at = self._forget_at(book)
        return due if forget_at is None or (due is not None and due < forget_at) else forget_at

    def _trackers(self, book: RuleBook) -> list[tuple[Tracker, RuleSettings]]:
        """Every tracker of the shard with its settings: the brokers, the cluster, the targets."""
        rules = self._rules(book)
        trackers: list[tuple[Tracker, RuleSettings]] = [(broker, rules) for broker in self.brokers.values()]
        if self.cluster is not None:
            trackers.append((self.cluster, rules))
        trackers += [(target, book.for_target(name)) for name, target in self.targets.items()]
        if self.observers is not None:
            trackers.append((self.observers, rules))
        return trackers

    def _rule_deadline(self, book: RuleBook) -> int | None:
        inc = self.incidents
        due = min((tracker.earliest(rules, inc) for tracker, rules in self._trackers(book)), default=math.inf)
        return None if due == math.inf else int(due)

    def advance(self, watermark: int, book: RuleBook) -> ShardOutput:
        """Fire every timer the watermark has passed (a timer at T fires once W > T)."""
        self._ttl_ms = book.defaults.state_ttl_ms
        self._book = book
        result = ShardOutput()
        out = Emitter(cause=(TIMER_PHASE, ()))
        done = None
        while True:
            due = self._rule_deadline(book)
            if due is None or due >= watermark or (done is not None and due <= done):
                break
            done = due
            for tracker, rules in self._trackers(book):
                # (`due` is the earliest of every tracker's: one of them that has it has it as its earliest.)
                if tracker.earliest(rules, self.incidents) == due:
                    tracker.on_time(due, rules, self.incidents, out)
                    if isinstance(tracker, BrokerTracker):  # the others' rows are written at their events
                        result.brokers.append(tracker.snapshot())
        result.alerts = out.alerts
        if self.observers is not None:
            result.handoffs += self.observers.drain()
        return result

    def forgotten(self, watermark: int, book: RuleBook) -> bool:
        return self.removed_at is not None or super().forgotten(watermark, book)

    # -- events -----------------------------------------------------------------------------

    def process(self, events: Iterable[tuple[Position, Event | BusGap]], watermark: int,
                book: RuleBook) -> ShardOutput:
        """Apply one micro-batch of this shard's events, after the timers the watermark passed. A
        `BusGap` among them (at its `ts`: the last event read before the lost records) says where
        the job was blind."""
        result = self.advance(watermark, book)
        self._forget_quiet_brokers(watermark, book)
        touched_brokers: set[int] = set()
        touched_targets: set[str] = set()
        touched_cluster = False
        # Deadlines that an event proves passed fire as if their timer had fired first.
        timers = Emitter(cause=(TIMER_PHASE, ()))
        out = Emitter()
        ttl = book.defaults.state_ttl_ms
        for position, event in sorted(events, key=lambda pe: (pe[1].ts, pe[0])):
            if event.__class__ is BusGap:
                self._bus_gap(event, book, timers)  # type: ignore[arg-type]
                continue
            if event.ts < watermark:
                result.late.append((position, event))
                continue
            if event.__class__ is CollectorTargets:  # told to every shard: no news of this one's subject
                out.cause = (EVENT_PHASE, (event.ts, *position))
                self._watching(event, position, book, out, result)  # type: ignore[arg-type]
                continue
            if self.last_event_ms is not None and event.ts - self.last_event_ms > ttl:
                self._quiet_for_long(event.ts, book, result)
            if self.last_event_ms is None or event.ts > self.last_event_ms:
                self.last_event_ms = event.ts
            out.cause = (EVENT_PHASE, (event.ts, *position))
            if self.shard.startswith(TARGET_PREFIX):
                touched_targets |= self._target_event(event, position, book, out, timers, result)
            else:
                brokers, cluster = self._cluster_event(event, position, book, out, result, timers)
                touched_brokers |= brokers
                touched_cluster |= cluster
        if self.observers is not None:
            result.handoffs += self.observers.drain()
        result.alerts += timers.alerts + out.alerts  # in no particular order: each alert has its sort key
        # (A broker touched before the shard started over within this batch is gone.)
        result.brokers += [self.brokers[b].snapshot() for b in sorted(touched_brokers) if b in self.brokers]
        if touched_cluster and self.cluster is not None:
            result.clusters.append(self.cluster.snapshot())
            result.controller_changes = self.cluster.drain_history()
        result.targets += [self.targets[t].snapshot() for t in sorted(touched_targets) if t in self.targets]
        return result

    def _bus_gap(self, gap: BusGap, book: RuleBook, timers: Emitter) -> None:
        """The job read nothing of bus partition `gap.source` from `gap.ts` to `gap.until_ms`: records
        the bus dropped unread. When the shard's heartbeats travel there, that time is blindness, not
        silence: what fell due before it fires, and every broker's session restarts at its end (a
        broker still silent then fires one session later)."""
        if gap.source not in self.heartbeat_sources:
            return
        rules = self._rules(book)
        for broker in self.brokers.values():
            broker.advance_to(gap.ts, rules, self.incidents, timers)
            broker.restart_session(gap.until_ms, self.incidents)

    def _quiet_for_long(self, now: int, book: RuleBook, result: ShardOutput) -> None:
        """The shard heard nothing for longer than the state TTL before `now`: what fell due
        meanwhile fires, and with nothing open the shard starts over (forgetting.py)."""
        passed = self.advance(now, book)
        result.alerts += passed.alerts
        result.brokers += passed.brokers
        result.handoffs += passed.handoffs
        if not self.incidents.open:
            self._start()
            self._derive()

    def _forget_quiet_brokers(self, now: int, book: RuleBook) -> None:
        """Drop the brokers that would start over at their next event (after `now`): forgetting
        them earlier changes nothing, and the state holds only the brokers of the last TTL."""
        if not self.brokers:
            return
        rules, ttl = self._rules(book), book.defaults.state_ttl_ms
        quiet = [b for b, tracker in self.brokers.items() if tracker.forgettable(now, ttl, rules, self.incidents)]
        for broker_id in quiet:
            del self.brokers[broker_id]
        if not self._listing_ids.isdisjoint(quiet):
            self._forget_listing()
        self.advertisements.forget_lapsed(now, ttl)

    def _broker(self, broker_id: int, at: int, rules: RuleSettings, ttl: int, timers: Emitter) -> BrokerTracker:
        """The broker, with what fell due before `at` fired; started over when it was quiet for
        longer than the state TTL with nothing open (README "Forgetting")."""
        tracker = self.brokers.get(broker_id)
        if tracker is not None:
            tracker.advance_to(at, rules, self.incidents, timers)
            if tracker.forgettable(at, ttl, rules, self.incidents):
                tracker = None
                self._forget_listing()
        if tracker is None:
            tracker = self.brokers[broker_id] = BrokerTracker(self.cluster_id or None, broker_id)
            tracker.replaced = self._replaced
            if self.observers is not None:
                tracker.observe_until(self.observers.until)
            if self.cluster is not None and self.cluster.none_since is not None:
                tracker.hold_session(self.cluster.none_since)  # first heard while no controller is reported
        return tracker

    def _controller(self) -> ClusterTracker:
        """The cluster's controller rules, started at the first report (watched in rounds if its brokers are)."""
        if self.cluster is None:
            self.cluster = ClusterTracker(self.cluster_id, in_rounds=self.observers is not None)
        return self.cluster

    def _cluster_event(self, event: Event, position: Position, book: RuleBook, out: Emitter,
                       result: ShardOutput, timers: Emitter) -> tuple[set[int], bool]:
        rules = self._rules(book)
        inc = self.incidents
        ttl = book.defaults.state_ttl_ms
        if event.__class__ is CollectorRound:
            return self._round(event, position, rules, ttl, out, timers, result), False  # type: ignore[arg-type]
        if event.__class__ is QuorumReading:
            return self._reading(event, position, rules, ttl, out, timers, result), True  # type: ignore[arg-type]
        if event.__class__ is PartitionLayout:
            # What fell due before it fires with the layout of its own moment, whatever the micro-batches.
            self._advance_brokers(event.ts, rules, timers)
            if self.layout is None:
                self.layout = LayoutTracker(self.cluster_id)
            self.layout.on_layout(event, inc, out)  # type: ignore[arg-type]
            return set(), False
        if isinstance(event, MetadataResponse):
            self._controller().advance_to(event.ts, rules, inc, timers)
            if event.target != self.cluster.target:
                # Another target reports the cluster from now on: what fell due before carries the last one's name.
                self._advance_brokers(event.ts, rules, timers)
            touched: set[int] = set()
            held = self.cluster.none_since is not None
            takeover = self.cluster.on_response(event, rules, inc, out)
            self._controller_moment(event.ts, takeover, held, rules, ttl, timers)
            if event.brokers:
                self._advance_brokers(event.ts, rules, timers)
                touched |= self._listed(event, rules, ttl, out, timers)
                result.handoffs += self.advertisements.listed(self.cluster_id, event.brokers, event.ts, ttl,
                                                              event.target, position)
            if event.responder_node_id is not None:
                broker = self._broker(event.responder_node_id, event.ts, rules, ttl, timers)
                broker.on_answer(event, rules, inc, out)
                broker.updated_ms = max(broker.updated_ms, event.ts)
                touched.add(event.responder_node_id)
            if event.brokers:
                touched |= self._leave_replaced(event.ts, out)
            return touched, True
        broker = self._broker(event.broker_id, event.ts, rules, ttl, timers)
        broker.updated_ms = max(broker.updated_ms, event.ts)
        adverts = self.advertisements
        if isinstance(event, BrokerHeartbeat):
            if position[0] not in self.heartbeat_sources:
                self.heartbeat_sources = self.heartbeat_sources | {position[0]}
            if event.rack is not None and event.rack != broker.rack:
                self._forget_listing()
            broker.on_heartbeat(event, rules, inc, out)
            if event.kind == "registration" and event.endpoints:
                self._advance_brokers(event.ts, rules, timers)
                result.handoffs += adverts.registered(
                    self.cluster_id, event.broker_id, frozenset(e.address for e in event.endpoints), event.ts, ttl,
                    position)
                return {event.broker_id} | self._leave_replaced(event.ts, out), False
            else:
                result.handoffs += adverts.heard(self.cluster_id, event.broker_id, event.ts, ttl, position)
        else:
            assert isinstance(event, BrokerState)
            if event.state == "OFFLINE" and event.reason == UNREGISTERED:
                # It left the controller's registrations: it is gone, not down (a crash stays registered).
                broker.leave(event.ts, inc, out)
                self._forget_listing()
            else:
                broker.on_state(event, rules, inc, out)
            if event.state == "OFFLINE":  # no longer registered: it advertises nothing
                self._advance_brokers(event.ts, rules, timers)
                result.handoffs += adverts.unregistered(self.cluster_id, [event.broker_id], event.ts, ttl, position)
            else:
                result.handoffs += adverts.heard(self.cluster_id, event.broker_id, event.ts, ttl, position)
            result.transitions.append({
                "cluster_id": self.cluster_id, "broker_id": event.broker_id, "ts": event.ts,
                "state": event.state, "previous_state": event.previous_state, "reason": event.reason,
            })
        return {event.broker_id}, False

    def _advance_brokers(self, now: int, rules: RuleSettings, timers: Emitter) -> None:
        """Before the cluster's advertisements change at `now`: what fell due before it fires first,
        so a heartbeat deadline sees the advertisements of its own moment (`_replaced`), whatever
        the micro-batches."""
        for broker in self.brokers.values():
            broker.advance_to(now, rules, self.incidents, timers)

    def _replaced(self, broker: BrokerTracker, now: int) -> bool:
        """Another node id of the cluster took an address of the broker's (README "Broker rules")."""
        return self.advertisements.taken_from(broker.broker_id, broker.endpoints, now, self._ttl_ms)

    def _leave_replaced(self, now: int, out: Emitter) -> set[int]:
        """After an advertisement at `now`: the heartbeat-lost brokers another node id replaced leave
        the cluster (their ids)."""
        if not any(rule == HEARTBEAT_LOST for rule, _ in self.incidents.open):
            return set()
        gone = {broker_id for broker_id, broker in self.brokers.items()
                if broker.gone_at is None and self.incidents.is_firing(HEARTBEAT_LOST, broker.subject)
                and self._replaced(broker, now)}
        for broker_id in sorted(gone):
            self.brokers[broker_id].leave(now, self.incidents, out)
        if gone:
            self._forget_listing()
        return gone

    def _listed(self, event: MetadataResponse, rules: RuleSettings, ttl: int, out: Emitter,
                timers: Emitter) -> frozenset[int]:
        """The brokers a successful response lists: the ids of the brokers it touched."""
        brokers, ts = event.brokers or (), event.ts
        if brokers == self._listing and ts - self._listing_ms <= ttl:  # (none of them can be quiet for the TTL)
            for tracker in self._listing_trackers:
                tracker.listed_again(ts, rules, self.incidents, timers)
            self._listing_ms = max(self._listing_ms, ts)
            return self._listing_ids
        trackers = []
        for entry in brokers:
            broker = self._broker(entry.node_id, ts, rules, ttl, timers)
            broker.on_listed(entry, ts, rules, self.incidents, out, event.target)
            broker.updated_ms = max(broker.updated_ms, ts)
            trackers.append(broker)
        ids = frozenset(entry.node_id for entry in brokers)
        # A broker known from broker lists alone holds nothing a rule reads: once a list omits it,
        # it goes (forgetting it at its TTL instead would change no alert, only keep it longer).
        for broker_id in [b for b, tracker in self.brokers.items() if b not in ids and tracker.only_listed()]:
            del self.brokers[broker_id]
        if all(entry.fenced is None for entry in brokers):
            self._listing, self._listing_trackers, self._listing_ids = brokers, trackers, ids
            self._listing_ms = ts
        else:
            self._forget_listing()
        return ids

    def _target_event(self, event: Event, position: Position, book: RuleBook, out: Emitter, timers: Emitter,
                      result: ShardOutput) -> set[str]:
        assert isinstance(event, MetadataResponse)
        inc = self.incidents
        tracker = self.targets.get(event.target)
        if tracker is None:
            tracker = self.targets[event.target] = TargetTracker(event.target)
        tracker.advance_to(event.ts, book.for_target(event.target), inc, timers)
        if event.source not in self.watched_by:
            self.watched_by = self.watched_by | {event.source}
        tracker.on_response(event, book, inc, out)
        check_misrouted(event, inc, out)
        if event.ok and event.expected is None and event.cluster_id:
            result.handoffs += self.held_id.on_bootstrap(event, book.defaults.state_ttl_ms, position)
        return {event.target}
