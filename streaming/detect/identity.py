"""Identity rules (KIP-78, KIP-1262): pinned ids, duplicates, invalid ids, unreachable targets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from streaming.config import RuleBook, RuleSettings
from streaming.contract import MetadataResponse
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.forgetting import LastHeard

__all__ = ["DuplicateRegistry", "TargetTracker", "valid_cluster_id"]

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

    def on_time(self, now: int, rules: RuleSettings, incidents: Incidents, out: Emitter) -> None:
        window = rules.unreachable_ms
        if self.failing_since is not None and now == self.failing_since + window:
            incidents.fire(out, UNREACHABLE, self.subject, now,
                           f"every probe of {self.target} failed for {window} ms", target=self.target,
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
                               f"{self.target} reports a cluster id that is not valid (KIP-78)",
                               cluster_id=r.cluster_id, target=self.target, endpoint=r.endpoint,
                               details={"reported": r.cluster_id})
        elif r.ok and self.reported_id:
            incidents.fire(out, ID_INVALID, s, r.ts,
                           f"{self.target} reported a cluster id before and now reports none",
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
                           f"bootstrap of {self.target} reports cluster id {r.cluster_id}, "
                           f"pinned {self.pinned}",
                           cluster_id=r.cluster_id, target=self.target, endpoint=r.endpoint,
                           details={"pinned_cluster_id": self.pinned, "reported": r.cluster_id})

    def snapshot(self) -> dict[str, Any]:
        return {"target": self.target, "pinned_cluster_id": self.pinned,
                "last_cluster_id": self.last_cluster_id, "last_ok_ms": self.last_ok_ms,
                "last_error": self.last_error, "last_error_ms": self.last_error_ms,
                "updated_ms": self.updated_ms}


@dataclass
class DuplicateRegistry:
    """Which targets hold which cluster id, with the endpoints their bootstrap advertised."""

    # cluster id -> target -> advertised endpoints
    holders: dict[str, dict[str, frozenset[str]]] = field(default_factory=dict)
    held_by: dict[str, str] = field(default_factory=dict)
    # When each target's bootstrap was last heard of, to forget the targets gone quiet.
    heard: LastHeard[str] = field(default_factory=LastHeard)

    def on_bootstrap(self, r: MetadataResponse, incidents: Incidents, out: Emitter) -> None:
        assert r.cluster_id is not None
        self.heard.heard(r.target, r.ts)
        endpoints = frozenset(b.address for b in r.brokers or ())
        previous = self.held_by.get(r.target)
        self.held_by[r.target] = r.cluster_id
        touched = {r.cluster_id}
        if previous is not None and previous != r.cluster_id:
            self.holders.get(previous, {}).pop(r.target, None)
            touched.add(previous)
        self.holders.setdefault(r.cluster_id, {})[r.target] = endpoints
        for cluster_id in sorted(touched):
            pair = self._disjoint_pair(cluster_id)
            if pair:
                incidents.fire(out, ID_DUPLICATE, cluster_id, r.ts,
                               f"cluster id {cluster_id} is reported by {pair[0]} and {pair[1]}, "
                               "which share no endpoint",
                               cluster_id=cluster_id, details={"targets": list(pair)})
            else:
                incidents.resolve(out, ID_DUPLICATE, cluster_id, r.ts)
            if not self.holders.get(cluster_id):
                self.holders.pop(cluster_id, None)

    def _disjoint_pair(self, cluster_id: str) -> tuple[str, str] | None:
        held = sorted(self.holders.get(cluster_id, {}).items())
        for i, (a, eps_a) in enumerate(held):
            for b, eps_b in held[i + 1:]:
                if not eps_a & eps_b:
                    return a, b
        return None

    def forget_quiet(self, now: int, ttl_ms: int, incidents: Incidents) -> None:
        """Forget the holdings of the targets quiet for longer than `ttl_ms`, but of those whose
        id is in an open duplicate (streaming/detect/forgetting.py)."""
        for target in self.heard.quiet(now, ttl_ms):
            cluster_id = self.held_by[target]
            if incidents.is_firing(ID_DUPLICATE, cluster_id):
                self.heard.keep(target, now)
                continue
            # With no duplicate open, one holder fewer cannot make one.
            del self.held_by[target]
            holders = self.holders[cluster_id]
            del holders[target]
            if not holders:
                del self.holders[cluster_id]
            self.heard.forget(target)
