"""Identity rules (KIP-78, KIP-1262): pinned ids, duplicates, invalid ids, unreachable targets."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from streaming.config import RuleBook, RuleSettings
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.forgetting import Lease
from streaming.detect.naming import duration_text
from streaming.records.contract import MetadataResponse

__all__ = ["HeldId", "IdChange", "IdHolders", "TargetTracker", "valid_cluster_id"]

ID_CHANGED = "cluster.id_changed"
ID_DUPLICATE = "cluster.id_duplicate"
ID_INVALID = "cluster.id_invalid"
UNREACHABLE = "cluster.unreachable"

_VALID_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def valid_cluster_id(cluster_id: str) -> bool:
    return bool(_VALID_ID.match(cluster_id))


def _misrouted_answer(r: MetadataResponse) -> bool:
    """An endpoint that answered for another cluster says nothing about this target's identity."""
    return bool(r.expected and r.expected.cluster_id and r.cluster_id
                and r.cluster_id != r.expected.cluster_id)


@dataclass
class TargetTracker:
    """One configured target (a cluster name the collectors probe); a `Tracker` whose `rules`
    are the target's settings (`RuleBook.for_target`)."""

    target: str
    pinned: str | None = None
    reported_id: bool = False
    failing_since: int | None = None
    last_cluster_id: str | None = None
    last_ok_ms: int | None = None
    last_error: str | None = None
    last_error_ms: int | None = None
    updated_ms: int = 0

    @property
    def subject(self) -> str:
        return self.target

    def deadlines(self, rules: RuleSettings, incidents: Incidents) -> list[int]:
        if self.failing_since is not None and not incidents.is_firing(UNREACHABLE, self.subject):
            return [self.failing_since + rules.unreachable_ms]
        return []

    def earliest(self, rules: RuleSettings, incidents: Incidents) -> float:
        return min(self.deadlines(rules, incidents), default=math.inf)  # (a few deadlines: looked at each time)

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        window = rules.unreachable_ms
        if self.failing_since is not None and now == self.failing_since + window:
            incidents.fire(out, UNREACHABLE, self.subject, now,
                           f"every probe failed for {duration_text(window)}", target=self.target,
                           details={"failing_since_ms": self.failing_since, "last_error": self.last_error})

    def advance_to(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        for due in self.deadlines(rules, incidents):
            if due < now:
                self.on_time(due, rules, incidents, out)

    def on_response(self, r: MetadataResponse, book: RuleBook, incidents: Incidents, out: Emitter) -> None:
        s = self.subject
        self.updated_ms = max(self.updated_ms, r.ts)
        if not r.ok:
            self.last_error, self.last_error_ms = r.error, r.ts
            if self.failing_since is None:
                self.failing_since = r.ts
        else:
            self.last_ok_ms = r.ts
            self.failing_since = None
            incidents.resolve(out, UNREACHABLE, s, r.ts)
        if not _misrouted_answer(r):
            self._check_valid(r, incidents, out)
        if r.ok and r.expected is None and r.cluster_id:
            self._check_pinned(r, book, incidents, out)

    def _check_valid(self, r: MetadataResponse, incidents: Incidents, out: Emitter) -> None:
        s = self.subject
        if r.cluster_id:
            if valid_cluster_id(r.cluster_id):
                self.reported_id = True
                incidents.resolve(out, ID_INVALID, s, r.ts)
            else:
                incidents.fire(out, ID_INVALID, s, r.ts,
                               "the reported cluster id is not valid (KIP-78)",
                               cluster_id=r.cluster_id, target=self.target, endpoint=r.endpoint,
                               details={"reported": r.cluster_id})
        elif r.ok and self.reported_id:
            incidents.fire(out, ID_INVALID, s, r.ts,
                           "a cluster id was reported before and now none is",
                           target=self.target, endpoint=r.endpoint, details={"reported": None})

    def _check_pinned(self, r: MetadataResponse, book: RuleBook, incidents: Incidents, out: Emitter) -> None:
        s = self.subject
        self.last_cluster_id = r.cluster_id
        if self.pinned is None:
            self.pinned = book.pinned_ids.get(self.target, r.cluster_id)
        if r.cluster_id == self.pinned:
            incidents.resolve(out, ID_CHANGED, s, r.ts)
        else:
            incidents.fire(out, ID_CHANGED, s, r.ts,
                           f"bootstrap reports cluster id {r.cluster_id}, pinned {self.pinned}",
                           cluster_id=r.cluster_id, target=self.target, endpoint=r.endpoint,
                           details={"pinned_cluster_id": self.pinned, "reported": r.cluster_id})

    def snapshot(self) -> dict[str, Any]:
        return {"target": self.target, "pinned_cluster_id": self.pinned,
                "last_cluster_id": self.last_cluster_id, "last_ok_ms": self.last_ok_ms,
                "last_error": self.last_error, "last_error_ms": self.last_error_ms,
                "updated_ms": self.updated_ms}


@dataclass(frozen=True, slots=True)
class IdChange:
    """What a target's shard hands on to the shard of a cluster id (`dup:<cluster id>`): `target`
    holds it, with the endpoints its bootstrap advertised, until `until` (its lease); or, with
    `endpoints` None, holds it no more. `position`, `seq`: of the bootstrap response it comes
    from, and its place among that response's changes."""

    cluster_id: str
    ts: int
    target: str
    endpoints: frozenset[str] | None
    until: int | None
    position: tuple[Any, ...]
    seq: int


@dataclass
class HeldId:
    """The cluster id a target holds (its latest successful bootstrap's) and the endpoints that
    bootstrap advertised, kept by the target's shard; the changes go to the ids' shards."""

    cluster_id: str | None = None
    endpoints: frozenset[str] = frozenset()
    lease: Lease = field(default_factory=Lease)

    def on_bootstrap(self, r: MetadataResponse, ttl_ms: int, position: tuple[Any, ...]) -> list[IdChange]:
        assert r.cluster_id is not None
        endpoints = frozenset(b.address for b in r.brokers or ())
        renew = self.lease.renew_due(r.ts, ttl_ms)  # after a lapse too: the id's shard may have forgotten it
        if renew:
            self.lease.renewed_ms = r.ts
        changes = []
        if self.cluster_id is not None and self.cluster_id != r.cluster_id:
            changes.append(IdChange(self.cluster_id, r.ts, r.target, None, None, position, 0))
        if renew or (r.cluster_id, endpoints) != (self.cluster_id, self.endpoints):
            changes.append(IdChange(r.cluster_id, r.ts, r.target, endpoints, self.lease.until(ttl_ms), position, 1))
        self.cluster_id, self.endpoints = r.cluster_id, endpoints
        return changes

    def released(self, target: str, at: int, position: tuple[Any, ...]) -> list[IdChange]:
        """The target is no longer watched: it holds its id no more."""
        held, self.cluster_id, self.endpoints = self.cluster_id, None, frozenset()
        return [] if held is None else [IdChange(held, at, target, None, None, position, 0)]


@dataclass
class IdHolders:
    """The targets holding one cluster id (the state of its `dup:` shard): target -> (the
    endpoints its bootstrap advertised, the end of its lease). A target whose lease ended holds
    the id no more."""

    cluster_id: str
    holders: dict[str, tuple[frozenset[str], int]] = field(default_factory=dict)

    def deadline(self, incidents: Incidents) -> int | None:
        """While the duplicate is open: the lease end after which no two holders share nothing."""
        if not incidents.is_firing(ID_DUPLICATE, self.cluster_id):
            return None
        ends = sorted({until for _, until in self.holders.values()})  # the last one leaves no holder
        return next(end for end in ends
                    if _disjoint_pair({t: held for t, held in self.holders.items() if held[1] > end}) is None)

    def on_time(self, now: int, incidents: Incidents, out: Emitter) -> None:
        self._drop_ended(now + 1)
        if _disjoint_pair(self.holders) is None:
            incidents.resolve(out, ID_DUPLICATE, self.cluster_id, now)

    def apply(self, change: IdChange, incidents: Incidents, out: Emitter) -> None:
        """A hand-off at `change.ts`, once every deadline before it was applied."""
        self._drop_ended(change.ts)  # none of them makes or ends a duplicate (see `deadline`)
        if change.endpoints is None:
            self.holders.pop(change.target, None)
        else:
            assert change.until is not None
            self.holders[change.target] = (change.endpoints, change.until)
        pair = _disjoint_pair(self.holders)
        if pair:
            incidents.fire(out, ID_DUPLICATE, self.cluster_id, change.ts,
                           f"cluster id {self.cluster_id} is reported by {pair[0]} and {pair[1]}, "
                           "which share no endpoint",
                           cluster_id=self.cluster_id, details={"targets": list(pair)})
        else:
            incidents.resolve(out, ID_DUPLICATE, self.cluster_id, change.ts)

    def _drop_ended(self, now: int) -> None:
        """Forget the targets whose lease ended before `now`."""
        for target in [t for t, (_, until) in self.holders.items() if until < now]:
            del self.holders[target]


def _disjoint_pair(holders: dict[str, tuple[frozenset[str], int]]) -> tuple[str, str] | None:
    """The first two holders (in name order) that share no endpoint."""
    held = sorted(holders.items())
    for i, (a, (eps_a, _)) in enumerate(held):
        for b, (eps_b, _) in held[i + 1:]:
            if not eps_a & eps_b:
                return a, b
    return None
