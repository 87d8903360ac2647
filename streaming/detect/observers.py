"""Who watches a cluster in rounds (issue 41): a collector's silence is blindness, not its brokers'.

A probe derives a cluster's heartbeats from its own rounds (DescribeQuorum), so when its rounds stop
(a crash, a freeze, a rollout, a round still busy behind slow DNS, a bus outage longer than its
buffer) the heartbeats stop with them, and read as silence of every broker it watches: measured on
main 69ef28b, a probe frozen for 20 s paged `broker.heartbeat_lost` for each of its six brokers. A
collector that says when it finished a round (`collector_round`, streaming/records/collector.py)
lets detection tell the two apart (README.md, "Collectors: rounds, gaps, leaving"):

- A cluster's *observers* are the (source, target) pairs whose rounds reached it; it is observed up
  to the latest round of any of them (`until`). A deadline that fires on silence or on a state still
  held (a broker's heartbeat session, fenced, STOPPING) falls due only once a round at or after it
  shows it still so (BrokerTracker.observed_until); the cluster's no controller and disagreement, once
  a report of the controller at or after it does (ClusterTracker.reported_ms).
- A round that comes more than a broker session after the cluster's last one ends a *gap*: nobody
  watched meanwhile, so every broker's session restarts at that round, as after records the bus lost
  unread (bus_gaps.py).
- An observer silent for longer than a session is handed on to its source's shard (`src:<source>`,
  second pass): `SilentClusters` raises one `collector.silent` (warning) per source, naming what it no
  longer observes, resolved when every such cluster has its rounds back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from streaming.config import RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.records.collector import CollectorRound

__all__ = ["COLLECTOR_SILENT", "ClusterObservers", "CollectorSilence", "SilentClusters"]

COLLECTOR_SILENT = "collector.silent"


@dataclass(frozen=True)
class CollectorSilence:
    """What a cluster's shard hands on to the shard of a collector (`src:<source>`): from `ts`, its rounds of
    `target` (cluster `cluster_id`) have been missing since `since` for longer than a broker session; or,
    with `since` None, they are back at `ts`. `position`, `seq`: as every hand-off's (the round it comes
    from, or () for a deadline)."""

    source: str
    ts: int
    cluster_id: str
    target: str
    since: int | None
    position: tuple[Any, ...]
    seq: int


@dataclass
class _Observer:
    last_round: int
    silent: bool = False


@dataclass
class ClusterObservers:
    """The rounds of a cluster, per (source, target): a `Tracker` of the cluster's shard. Its hand-offs
    wait in `pending` for the shard to take them (`drain`)."""

    cluster_id: str
    rounds: dict[tuple[str, str], _Observer] = field(default_factory=dict)
    pending: list[CollectorSilence] = field(default_factory=list)

    @property
    def until(self) -> int | None:
        """Up to when the cluster is observed: its latest round (None: no collector says its rounds)."""
        return max((o.last_round for o in self.rounds.values()), default=None)

    def deadlines(self, rules: RuleSettings, incidents: Incidents) -> list[int]:
        return [o.last_round + rules.session_timeout_ms for o in self.rounds.values() if not o.silent]

    def earliest(self, rules: RuleSettings, incidents: Incidents) -> float:
        return min(self.deadlines(rules, incidents), default=math.inf)  # (a few deadlines: looked at each time)

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        for (source, target), o in self.rounds.items():
            if not o.silent and o.last_round + rules.session_timeout_ms == now:
                o.silent = True
                self.pending.append(CollectorSilence(source, now, self.cluster_id, target, o.last_round, (), 0))

    def advance_to(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        """Apply what fell due strictly before `now`."""
        for due in sorted(set(self.deadlines(rules, incidents))):
            if due < now:
                self.on_time(due, rules, incidents, out)

    def on_round(self, event: CollectorRound, position: tuple[Any, ...]) -> None:
        """A round of `event.source` (its deadline before `event.ts` applied first)."""
        key = (event.source, event.target)
        known = self.rounds.get(key)
        if known is not None and known.silent:
            self.pending.append(CollectorSilence(event.source, event.ts, self.cluster_id, event.target, None,
                                                 position, 0))
        last = event.ts if known is None else max(known.last_round, event.ts)
        self.rounds[key] = _Observer(last)

    def drops(self, source: str, targets: frozenset[str]) -> bool:
        """Whether `source`, watching only `targets` from now on, no longer watches this cluster through a target."""
        return any(key[0] == source and key[1] not in targets for key in self.rounds)

    def left(self, source: str, targets: frozenset[str], at: int, position: tuple[Any, ...]) -> None:
        """`source` watches only `targets` from `at` on: forget its other rounds of this cluster (a silence
        it had ends)."""
        for key in [key for key in self.rounds if key[0] == source and key[1] not in targets]:
            if self.rounds.pop(key).silent:
                self.pending.append(CollectorSilence(source, at, self.cluster_id, key[1], None, position, 0))

    def drain(self) -> list[CollectorSilence]:
        out, self.pending = self.pending, []
        return out


@dataclass
class SilentClusters:
    """The clusters one collector no longer observes (the state of its `src:` shard): (cluster id,
    target) -> silent since; one `collector.silent` alert while any is left.

    Hand-offs are applied in event time only once the watermark has passed them (`waiting` until
    then): a silence is handed on when the watermark passes its deadline, a return when its round is
    read, which can be batches earlier; applied as they come, a return would resolve the alert before
    a silence that began earlier was known (the alerts would depend on the micro-batches). All the
    hand-offs of one moment are applied before the alert fires, so it names every cluster silent then."""

    source: str
    silent: dict[tuple[str, str], int] = field(default_factory=dict)
    waiting: list[CollectorSilence] = field(default_factory=list)

    def deadline(self, incidents: Incidents) -> int | None:
        """The earliest hand-off waiting: it is applied once the watermark is past it."""
        return min((change.ts for change in self.waiting), default=None)

    def on_time(self, now: int, incidents: Incidents, out: Emitter) -> None:
        due = sorted((c for c in self.waiting if c.ts == now), key=lambda c: (c.position, c.seq))
        self.waiting = [c for c in self.waiting if c.ts != now]
        for change in due:
            key = (change.cluster_id, change.target)
            if change.since is None:
                self.silent.pop(key, None)
            else:
                self.silent[key] = change.since
        if not self.silent:
            incidents.resolve(out, COLLECTOR_SILENT, self.source, now)
        elif not incidents.is_firing(COLLECTOR_SILENT, self.source):
            names = sorted({target for _, target in self.silent})
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            incidents.fire(out, COLLECTOR_SILENT, self.source, now,
                           f"collector {self.source} has sent no round of {shown} for longer than a broker "
                           "session: their brokers are unobserved (no broker alert can fire for them meanwhile)",
                           source=self.source,
                           details={"since_ms": min(self.silent.values()),
                                    "clusters": [{"cluster_id": c, "target": t, "since_ms": since}
                                                 for (c, t), since in sorted(self.silent.items())]})

    def apply(self, change: CollectorSilence, incidents: Incidents, out: Emitter) -> None:
        """A hand-off: it waits for the watermark (see the class)."""
        self.waiting.append(change)
