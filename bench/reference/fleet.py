"""The rules that compare clusters and targets with each other: cluster.id_duplicate and
endpoint.collision, over the whole fleet."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import takewhile
from typing import Any

from .defaults import STATE_TTL
from .incidents import Alerts, Incidents

__all__ = ["Fleet", "address", "quiet"]


def address(entry: dict[str, Any]) -> str:
    return f"{entry['host']}:{entry['port']}"


def quiet(heard: dict[str, int], now: int) -> list[str]:
    """The keys heard of last more than the state TTL before `now`, of a dict kept oldest first."""
    return [key for key, _ in takewhile(lambda item: now - item[1] > STATE_TTL, heard.items())]


class Fleet:
    """cluster.id_duplicate and endpoint.collision, over the whole fleet."""

    def __init__(self, alerts: Alerts) -> None:
        self.inc = Incidents(alerts)
        self.held_by: dict[str, str] = {}  # target -> the id its latest successful bootstrap reported
        self.holders: dict[str, dict[str, frozenset[str]]] = {}  # id -> target -> its advertised endpoints
        self.adverts: dict[tuple[str, int], frozenset[str]] = {}  # (cluster id, node id) -> host:port set
        self.advertisers: dict[str, set[tuple[str, int]]] = {}  # host:port -> the pairs advertising it
        # When each target last bootstrapped, and each cluster id last advertised: oldest first
        # (events come in time order, and one heard again moves to the end).
        self.bootstrapped_at: dict[str, int] = {}
        self.advertised_at: dict[str, int] = {}

    def subjects(self) -> list[Any]:
        return []  # no timers

    @staticmethod
    def heard(times: dict[str, int], key: str, ts: int) -> None:
        times.pop(key, None)
        times[key] = ts

    def forget_quiet(self, now: int) -> None:
        """README "Forgetting", the fleet-wide part; a kept one is looked at again a TTL later."""
        for cluster_id in quiet(self.advertised_at, now):
            pairs = [pair for pair in self.adverts if pair[0] == cluster_id]
            if any(self.inc.firing("endpoint.collision", a) for pair in pairs for a in self.adverts[pair]):
                self.heard(self.advertised_at, cluster_id, now)
                continue
            for pair in pairs:  # none of its addresses collides: withdrawing them resolves nothing
                for a in self.adverts.pop(pair):
                    self.advertisers[a].discard(pair)
            del self.advertised_at[cluster_id]
        for target in quiet(self.bootstrapped_at, now):
            if self.inc.firing("cluster.id_duplicate", self.held_by[target]):
                self.heard(self.bootstrapped_at, target, now)
                continue
            del self.holders[self.held_by.pop(target)][target]  # one holder fewer cannot make a duplicate
            del self.bootstrapped_at[target]

    def on_bootstrap(self, r: dict[str, Any]) -> None:
        """A target holds the id of its latest successful bootstrap answer, with its advertised endpoints."""
        target, cluster_id, ts = r["target"], r["cluster_id"], r["ts"]
        self.heard(self.bootstrapped_at, target, ts)
        before = self.held_by.get(target)
        if before is not None:
            del self.holders[before][target]
        self.held_by[target] = cluster_id
        self.holders.setdefault(cluster_id, {})[target] = frozenset(address(b) for b in r.get("brokers") or ())
        for held_id in sorted({cluster_id, before} - {None}):
            holders = sorted(self.holders[held_id].items())
            disjoint = [(a, b) for i, (a, ea) in enumerate(holders) for b, eb in holders[i + 1:] if ea.isdisjoint(eb)]
            if disjoint:
                a, b = disjoint[0]
                self.inc.fire("cluster.id_duplicate", held_id, ts, f"cluster id {held_id} is reported by {a} and "
                              f"{b}, which share no endpoint", cluster_id=held_id, targets=[a, b])
            else:
                self.inc.resolve("cluster.id_duplicate", held_id, ts)

    def advertise(self, cluster_id: str, node_id: int, addresses: Iterable[str], ts: int,
                  target: str | None) -> None:
        """The advertisement of (cluster id, node id) is the host:port set it was last seen advertising."""
        pair, new = (cluster_id, node_id), frozenset(addresses)
        self.heard(self.advertised_at, cluster_id, ts)
        old = self.adverts.get(pair, frozenset())
        self.adverts[pair] = new
        for a in sorted(old - new):
            self.advertisers[a].discard(pair)
            if len(self.advertisers[a]) < 2:
                self.inc.resolve("endpoint.collision", a, ts)
        for a in sorted(new - old):
            self.advertisers.setdefault(a, set()).add(pair)
            names = sorted(f"{c}/{n}" for c, n in self.advertisers[a])
            if len(names) >= 2:
                self.inc.fire("endpoint.collision", a, ts, f"{a} is advertised by {', '.join(names)}",
                              cluster_id=cluster_id, target=target, endpoint=a, advertised_by=names)
