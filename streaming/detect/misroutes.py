"""Misrouted connections (KIP-1242) and endpoint collisions: where an endpoint really leads."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streaming.contract import REBOOTSTRAP_REQUIRED, Broker, MetadataResponse
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.forgetting import LastHeard

__all__ = ["AdvertisementRegistry", "check_misrouted"]

MISROUTED = "connection.misrouted"
COLLISION = "endpoint.collision"


def check_misrouted(r: MetadataResponse, incidents: Incidents, out: Emitter) -> None:
    """A probe of an endpoint with an expected identity (not a bootstrap)."""
    expected = r.expected
    if expected is None:
        return
    if r.error == REBOOTSTRAP_REQUIRED:
        incidents.fire(out, MISROUTED, r.endpoint, r.ts,
                       f"{r.endpoint} refused the expected identity (REBOOTSTRAP_REQUIRED)",
                       cluster_id=r.cluster_id, target=r.target, endpoint=r.endpoint,
                       details={"expected": {"cluster_id": expected.cluster_id, "node_id": expected.node_id},
                                "error": r.error})
        return
    if not r.ok:
        return  # a transport or other error says nothing about where the endpoint leads
    wrong_cluster = bool(r.cluster_id and expected.cluster_id and r.cluster_id != expected.cluster_id)
    wrong_node = (r.responder_node_id is not None and expected.node_id is not None
                  and r.responder_node_id != expected.node_id)
    if wrong_cluster or wrong_node:
        incidents.fire(out, MISROUTED, r.endpoint, r.ts,
                       f"{r.endpoint} reaches cluster {r.cluster_id} node {r.responder_node_id}, "
                       f"expected cluster {expected.cluster_id} node {expected.node_id}",
                       cluster_id=r.cluster_id, target=r.target, endpoint=r.endpoint,
                       details={"expected": {"cluster_id": expected.cluster_id, "node_id": expected.node_id},
                                "answered": {"cluster_id": r.cluster_id, "node_id": r.responder_node_id}})
    else:
        incidents.resolve(out, MISROUTED, r.endpoint, r.ts)


@dataclass
class AdvertisementRegistry:
    """Current advertisements: (cluster id, node id) -> the host:port set it last advertised."""

    adverts: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    advertisers: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    # When each cluster id last advertised anything, to forget the clusters gone quiet.
    heard: LastHeard[str] = field(default_factory=LastHeard)
    # Cluster id -> the broker list its last response advertised, while none of the cluster's
    # advertisements changed since. Nearly every response repeats its cluster's list, and then
    # each of its advertisements is one already made. A cache: not pickled, rebuilt on the way.
    _listed: dict[str, tuple[Broker, ...]] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"adverts": self.adverts, "advertisers": self.advertisers, "heard": self.heard}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Older layouts are brought up to date by streaming/detect/state_format.py.
        self.__dict__.update(state, _listed={})

    def advertise_listed(self, cluster_id: str, brokers: tuple[Broker, ...], at: int, incidents: Incidents,
                         out: Emitter, target: str | None = None) -> None:
        """A response of `cluster_id` (probing `target`) lists `brokers`, each at its one address."""
        self.heard.heard(cluster_id, at)
        if self._listed.get(cluster_id) == brokers:
            return
        for entry in brokers:
            self.advertise(cluster_id, entry.node_id, (entry.address,), at, incidents, out, target=target)
        self._listed[cluster_id] = brokers

    def advertise(self, cluster_id: str, node_id: int, addresses: Iterable[str], at: int,
                  incidents: Incidents, out: Emitter, target: str | None = None) -> None:
        self.heard.heard(cluster_id, at)
        pair = (cluster_id, node_id)
        new = frozenset(addresses)
        old = self.adverts.get(pair, frozenset())
        if new == old:
            return
        self.adverts[pair] = new
        self._listed.pop(cluster_id, None)
        for address in sorted(old - new):
            holders = self.advertisers.get(address, set())
            holders.discard(pair)
            if len(holders) < 2:
                incidents.resolve(out, COLLISION, address, at)
            if not holders:
                self.advertisers.pop(address, None)
        for address in sorted(new - old):
            holders = self.advertisers.setdefault(address, set())
            holders.add(pair)
            if len(holders) >= 2:
                names = sorted(f"{c}/{n}" for c, n in holders)
                incidents.fire(out, COLLISION, address, at,
                               f"{address} is advertised by {', '.join(names)}",
                               cluster_id=cluster_id, target=target, endpoint=address,
                               details={"advertised_by": names})

    def forget_quiet(self, now: int, ttl_ms: int, incidents: Incidents) -> None:
        """Withdraw the advertisements of the clusters quiet for longer than `ttl_ms`, but of those
        with an address in an open collision (streaming/detect/forgetting.py)."""
        quiet = set(self.heard.quiet(now, ttl_ms))
        if not quiet:
            return
        pairs = [pair for pair in self.adverts if pair[0] in quiet]
        colliding = {pair[0] for pair in pairs if any(incidents.is_firing(COLLISION, a) for a in self.adverts[pair])}
        for pair in pairs:
            if pair[0] in colliding:
                continue
            # None of its addresses collides, so withdrawing them resolves nothing.
            for address in self.adverts.pop(pair):
                holders = self.advertisers[address]
                holders.discard(pair)
                if not holders:
                    del self.advertisers[address]
        for cluster_id in quiet:
            if cluster_id in colliding:
                self.heard.keep(cluster_id, now)
            else:
                self.heard.forget(cluster_id)
                self._listed.pop(cluster_id, None)
