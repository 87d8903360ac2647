"""The rules that compare clusters and targets with each other: cluster.id_duplicate and
endpoint.collision, over the whole fleet."""

from __future__ import annotations

from typing import Any

from .defaults import STATE_TTL
from .incidents import Alerts, Incidents, advance

__all__ = ["Fleet", "address"]

# README "Forgetting": a pair's advertisement (a target's held id) stands until TTL after its
# lease was last renewed, at the first confirmation (bootstrap) more than TTL/16 after that.
RENEW_AFTER = STATE_TTL // 16


def address(entry: dict[str, Any]) -> str:
    return f"{entry['host']}:{entry['port']}"


def renew(renewed: dict[str, int], key: str, ts: int) -> None:
    if key not in renewed or ts - renewed[key] > RENEW_AFTER:
        renewed[key] = ts


def disjoint_pair(holders: dict[str, frozenset[str]]) -> tuple[str, str] | None:
    held = sorted(holders.items())
    pairs = [(a, b) for i, (a, ea) in enumerate(held) for b, eb in held[i + 1:] if ea.isdisjoint(eb)]
    return pairs[0] if pairs else None


class Fleet:
    """cluster.id_duplicate and endpoint.collision, over the whole fleet."""

    def __init__(self, alerts: Alerts) -> None:
        self.alerts = alerts
        self.inc = Incidents(alerts)
        self.adverts: dict[tuple[str, int], frozenset[str]] = {}  # (cluster id, node id) -> host:port set
        self.renewed: dict[tuple[str, int], int] = {}  # pair -> when its advertisement's lease was last renewed
        self.listed: set[tuple[str, int]] = set()  # the pairs last seen in a broker list (not a registration)
        self.held_by: dict[str, tuple[str, frozenset[str]]] = {}  # target -> (id, endpoints) of its latest bootstrap
        self.bootstrapped: dict[str, int] = {}  # target -> when its held id's lease was last renewed

    def subjects(self) -> list[Fleet]:
        return [self]

    def advertisers(self, a: str, now: int) -> list[tuple[str, int]]:
        """The pairs whose current advertisement (lease not ended at `now`) holds `a`."""
        return [p for p, addresses in self.adverts.items() if a in addresses and not self.lapsed(p, now)]

    def lapsed(self, pair: tuple[str, int], now: int) -> bool:
        return now - self.renewed[pair] > STATE_TTL

    def holders(self, cluster_id: str, now: int) -> dict[str, frozenset[str]]:
        return {t: eps for t, (held, eps) in self.held_by.items()
                if held == cluster_id and self.bootstrapped[t] + STATE_TTL >= now}

    def deadlines(self) -> list[int]:
        """While a collision or duplicate is open: the lease end that ends it."""
        return [end for _, end in self.endings()]

    def endings(self) -> list[tuple[tuple[str, str], int]]:
        ends = []
        for rule, subject in self.inc.open:
            if rule == "endpoint.collision":
                leases = sorted(self.renewed[p] + STATE_TTL for p, a in self.adverts.items() if subject in a)
                ends.append(((rule, subject), leases[-2]))  # then one pair or none is left
            else:
                leases = sorted({self.bootstrapped[t] + STATE_TTL for t, (h, _) in self.held_by.items()
                                 if h == subject})
                # the first lease end after which no two holders share nothing
                ends.append(((rule, subject),
                             next(end for end in leases if not disjoint_pair(self.holders(subject, end + 1)))))
        return ends

    def on_time(self, now: int) -> None:
        for (rule, subject), end in self.endings():
            if end == now:
                self.inc.resolve(rule, subject, now)

    def advance(self, now: int) -> None:
        advance(self.deadlines, self.on_time, now, self.alerts)

    def on_bootstrap(self, r: dict[str, Any]) -> None:
        """A target holds the id of its latest successful bootstrap answer, with its advertised endpoints."""
        target, cluster_id, ts = r["target"], r["cluster_id"], r["ts"]
        self.advance(ts)
        before = self.held_by.get(target, (None,))[0]
        renew(self.bootstrapped, target, ts)
        self.held_by[target] = (cluster_id, frozenset(address(b) for b in r.get("brokers") or ()))
        for held_id in sorted({cluster_id, before} - {None}):
            pair = disjoint_pair(self.holders(held_id, ts))
            if pair:
                a, b = pair
                self.inc.fire("cluster.id_duplicate", held_id, ts, f"cluster id {held_id} is reported by {a} and "
                              f"{b}, which share no endpoint", cluster_id=held_id, targets=[a, b])
            else:
                self.inc.resolve("cluster.id_duplicate", held_id, ts)

    def advertise(self, cluster_id: str, entries: list[tuple[int, frozenset[str]]], ts: int,
                  target: str | None, listing: bool) -> None:
        """The advertisement of (cluster id, node id) is the host:port set it was last seen advertising;
        a broker list (`listing`) also ends the advertisement of every listed pair of the cluster it omits."""
        self.advance(ts)
        named = {(cluster_id, node_id) for node_id, _ in entries}
        omitted = sorted(p for p in self.listed if p[0] == cluster_id and p not in named) if listing else []
        # README: one event is one moment: every address a pair leaves is left before any is taken.
        for pair in omitted:
            self.withdraw(pair, ts)
        olds = {}
        for node_id, new in entries:
            pair = (cluster_id, node_id)
            if pair in self.adverts and self.lapsed(pair, ts):
                self.forget(pair)  # its lease ended: it starts over
            olds[pair] = old = self.adverts.get(pair, frozenset())
            self.adverts[pair] = old & new
            for a in sorted(old - new):
                if len(self.advertisers(a, ts)) < 2:
                    self.inc.resolve("endpoint.collision", a, ts)
        for node_id, new in entries:
            pair = (cluster_id, node_id)
            if pair not in self.renewed or ts - self.renewed[pair] > RENEW_AFTER:
                self.renewed[pair] = ts
            self.adverts[pair] = new
            (self.listed.add if listing else self.listed.discard)(pair)
            for a in sorted(new - olds[pair]):
                names = sorted(f"{c}/{n}" for c, n in self.advertisers(a, ts))
                if len(names) >= 2:
                    self.inc.fire("endpoint.collision", a, ts, f"{a} is advertised by {', '.join(names)}",
                                  cluster_id=cluster_id, target=target, endpoint=a, advertised_by=names)

    def unregistered(self, cluster_id: str, node_id: int, ts: int) -> None:
        """A broker_state OFFLINE: the broker is no longer registered and advertises nothing."""
        self.advance(ts)
        self.withdraw((cluster_id, node_id), ts)

    def confirmed(self, cluster_id: str, node_id: int, ts: int) -> None:
        """A heartbeat or another broker_state of the broker renews its advertisement's lease when due."""
        pair = (cluster_id, node_id)
        if pair not in self.adverts or ts - self.renewed[pair] <= RENEW_AFTER:
            return
        self.advance(ts)
        if self.lapsed(pair, ts):
            self.forget(pair)  # README: only a broker list or a registration advertises anew
        else:
            self.renewed[pair] = ts

    def taken_from(self, cluster_id: str, node_id: int, addresses: set[str], now: int) -> bool:
        """Another node id of the cluster advertises now an address of `addresses` that the node no
        longer advertises itself."""
        pair = (cluster_id, node_id)
        own = self.adverts[pair] if pair in self.adverts and not self.lapsed(pair, now) else frozenset()
        left = addresses - own
        return any(p[0] == cluster_id and p != pair and not self.lapsed(p, now) and not a.isdisjoint(left)
                   for p, a in self.adverts.items())

    def withdraw(self, pair: tuple[str, int], ts: int) -> None:
        if pair not in self.adverts:
            return
        lapsed, old = self.lapsed(pair, ts), self.adverts[pair]
        self.forget(pair)
        if not lapsed:  # (a lapsed one advertises nothing already)
            for a in sorted(old):
                if len(self.advertisers(a, ts)) < 2:
                    self.inc.resolve("endpoint.collision", a, ts)

    def withdraw_cluster(self, cluster_id: str, ts: int) -> None:
        """A removed cluster's advertisements are handed back: a collision they made resolves."""
        self.advance(ts)
        for pair in sorted(p for p in self.adverts if p[0] == cluster_id):
            self.withdraw(pair, ts)

    def release(self, target: str, ts: int) -> None:
        """A removed target's held id is handed back: a duplicate it made resolves."""
        self.advance(ts)
        if target not in self.held_by:
            return
        held_id = self.held_by.pop(target)[0]
        del self.bootstrapped[target]
        if not disjoint_pair(self.holders(held_id, ts)):
            self.inc.resolve("cluster.id_duplicate", held_id, ts)

    def forget(self, pair: tuple[str, int]) -> None:
        del self.adverts[pair], self.renewed[pair]
        self.listed.discard(pair)
