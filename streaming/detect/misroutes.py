"""Misrouted connections (KIP-1242) and endpoint collisions: where an endpoint really leads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streaming.contract import REBOOTSTRAP_REQUIRED, Broker, MetadataResponse
from streaming.detect.alerts import Emitter, Incidents
from streaming.detect.forgetting import Lease

__all__ = ["AddressChange", "AddressHolders", "Advertisements", "check_misrouted"]

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


@dataclass(frozen=True, slots=True)
class AddressChange:
    """What a cluster's shard hands on to the shard of one address it advertises (or advertised):
    the pair (`cluster_id`, `node_id`) holds `address` until `until` (its lease), or, with `until`
    None, advertises it no more. `target`: of the response that advertised it (None for a
    registration). `position`, `seq`: of the event it comes from, and its place among that
    event's changes."""

    address: str
    ts: int
    cluster_id: str
    node_id: int
    until: int | None
    target: str | None
    position: tuple[Any, ...]
    seq: int


@dataclass
class Advertisements:
    """What one cluster advertises (node id -> its host:port set), kept by the cluster's shard,
    which hears every event that changes it; the changes go to the addresses' shards."""

    by_node: dict[int, frozenset[str]] = field(default_factory=dict)
    lease: Lease = field(default_factory=Lease)
    # The broker list of the cluster's last response: nearly every response repeats it, and then
    # it changes nothing. A cache: not pickled, rebuilt on the way.
    _listed: tuple[Broker, ...] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"by_node": self.by_node, "lease": self.lease}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _listed=None)

    def listed(self, cluster_id: str, brokers: tuple[Broker, ...], at: int, ttl_ms: int,
               target: str | None, position: tuple[Any, ...]) -> list[AddressChange]:
        """A response of the cluster (probing `target`) lists `brokers`, each at its one address."""
        if brokers == self._listed and not self.lease.renew_due(at, ttl_ms):
            return []
        changes = self._advertise(cluster_id, [(b.node_id, frozenset((b.address,))) for b in brokers],
                                  at, ttl_ms, target, position)
        self._listed = brokers
        return changes

    def registered(self, cluster_id: str, node_id: int, addresses: frozenset[str], at: int, ttl_ms: int,
                   position: tuple[Any, ...]) -> list[AddressChange]:
        """A broker registered with the endpoints `addresses`."""
        self._listed = None
        return self._advertise(cluster_id, [(node_id, addresses)], at, ttl_ms, None, position)

    def _advertise(self, cluster_id: str, entries: list[tuple[int, frozenset[str]]], at: int, ttl_ms: int,
                   target: str | None, position: tuple[Any, ...]) -> list[AddressChange]:
        changes: list[AddressChange] = []

        def change(address: str, node_id: int, until: int | None) -> None:
            changes.append(AddressChange(address, at, cluster_id, node_id, until, target, position, len(changes)))

        if self.lease.lapsed(at, ttl_ms):
            self.by_node = {}  # quiet for longer than the TTL: every address has forgotten it; it starts over
        renew = self.lease.renew_due(at, ttl_ms)
        if renew:
            self.lease.renewed_ms = at
        until = self.lease.until(ttl_ms)
        held: set[tuple[int, str]] = set()
        for node_id, new in entries:
            old = self.by_node.get(node_id, frozenset())
            if new == old:
                continue
            self.by_node[node_id] = new
            for address in sorted(old - new):
                change(address, node_id, None)
            for address in sorted(new - old):
                change(address, node_id, until)
                held.add((node_id, address))
        if renew:
            for node_id, addresses in sorted(self.by_node.items()):
                for address in sorted(addresses):
                    if (node_id, address) not in held:
                        change(address, node_id, until)
        return changes


@dataclass
class AddressHolders:
    """The pairs advertising one address (the state of its `addr:` shard): (cluster id, node id)
    -> the end of its lease. A pair whose lease ended advertises the address no more."""

    address: str
    holders: dict[tuple[str, int], int] = field(default_factory=dict)

    def deadline(self, incidents: Incidents) -> int | None:
        """While the collision is open: the lease end that leaves one pair or none."""
        if not incidents.is_firing(COLLISION, self.address):
            return None
        return sorted(self.holders.values())[-2]

    def on_time(self, now: int, incidents: Incidents, out: Emitter) -> None:
        self._drop_ended(now + 1)
        if len(self.holders) < 2:
            incidents.resolve(out, COLLISION, self.address, now)

    def apply(self, change: AddressChange, incidents: Incidents, out: Emitter) -> None:
        """A hand-off at `change.ts`, once every deadline before it was applied."""
        self._drop_ended(change.ts)  # none of them makes or ends a collision (see `deadline`)
        pair = (change.cluster_id, change.node_id)
        if change.until is None:
            if self.holders.pop(pair, None) is not None and len(self.holders) < 2:
                incidents.resolve(out, COLLISION, self.address, change.ts)
            return
        new = pair not in self.holders
        self.holders[pair] = change.until
        if new and len(self.holders) >= 2:
            names = sorted(f"{c}/{n}" for c, n in self.holders)
            incidents.fire(out, COLLISION, self.address, change.ts,
                           f"{self.address} is advertised by {', '.join(names)}",
                           cluster_id=change.cluster_id, target=change.target, endpoint=self.address,
                           details={"advertised_by": names})

    def _drop_ended(self, now: int) -> None:
        """Forget the pairs whose lease ended before `now`."""
        for pair in [pair for pair, until in self.holders.items() if until < now]:
            del self.holders[pair]
